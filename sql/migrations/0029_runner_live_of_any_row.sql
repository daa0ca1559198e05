-- 0029: a runner's liveness, asked of the row of any table shaped as
-- cairn.runners.
--
-- cairn.runner_live (migration 0003) takes a row of cairn.runners. On Citus
-- (`cairn migrate --citus`) runners is a reference table, and Citus runs a
-- statement that reads it on a placement of it, a table of its own name
-- (runners_102009), whose rows are not of type cairn.runners: every
-- statement that asked cairn.runner_live(r, ...) there failed ("function
-- cairn.runner_live(runners_102009, bigint) does not exist"), and with them
-- the heartbeat's membership, the rebalance and the hand-over. The same
-- test, for a row of any type with heartbeat_at and lease_pid, resolved
-- where it is called; a row of cairn.runners still takes the function of
-- 0003, so one server runs what it ran. Citus reads a reference table from
-- the coordinator's own placement, so pg_stat_activity is the
-- coordinator's, where the lease backends are.
CREATE FUNCTION cairn.runner_live(r anyelement, ttl_ms bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT r.heartbeat_at > now() - ttl_ms * interval '1 millisecond'
       AND EXISTS (SELECT 1 FROM pg_stat_activity a
                   WHERE a.pid = r.lease_pid AND a.datname = current_database())
$$;
