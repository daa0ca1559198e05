-- 0003: one definition of a live runner, and signal timeouts recorded as
-- what they are.

-- A runner is live while its heartbeat is younger than ttl_ms and its lease
-- connection is still in pg_stat_activity. The workers' rebalance and
-- `cairn runners` both ask this function, so they cannot disagree.
CREATE FUNCTION cairn.runner_live(r cairn.runners, ttl_ms bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT r.heartbeat_at > now() - ttl_ms * interval '1 millisecond'
       AND EXISTS (SELECT 1 FROM pg_stat_activity a
                   WHERE a.pid = r.lease_pid AND a.datname = current_database())
$$;

-- A signal wait whose deadline passed is 'timed_out' (it used to be stored
-- as 'completed' with an error).
ALTER TABLE cairn.steps DROP CONSTRAINT steps_status_check;
ALTER TABLE cairn.steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('completed', 'failed', 'retrying', 'waiting', 'timed_out'));
UPDATE cairn.steps SET status = 'timed_out'
 WHERE kind = 'signal' AND status = 'completed' AND error IS NOT NULL;
