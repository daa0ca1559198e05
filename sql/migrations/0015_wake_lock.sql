-- 0015: a wake-up decided inside the writer's transaction is never lost.
--
-- A writer that wakes a run's owner inside the transaction that writes the
-- run (cairn.wake: the SQL API's enqueue, signal, cancel and retry, the
-- scheduler's fires, the client's release of held runs) reads runners.idle
-- before it commits. An owner that was busy (idle = false: no notification)
-- could commit idle = true and make its last claim before it sleeps between
-- that read and the writer's commit: the claim could not see the run, nobody
-- woke the owner, and the run waited for the poll (CAIRN_POLL_INTERVAL).
-- Writers that read the owner after their commit (the C client's enqueue)
-- never had that race.
--
-- Now such a writer first takes a shared transaction lock on the shard's
-- wake lock (one of 64 per group), and reads the owner only then, in a
-- statement of its own, so with a snapshot taken after the lock. An owner
-- goes idle only if it can take the wake locks of its groups at once
-- (cairn.go_idle, which waits for nothing): while a writer holds one, it
-- stays busy and claims again a moment later, and the writer's commit has
-- ended the wait. A worker that takes a shard is busy until the same test
-- passes, so a writer that read the shard's previous owner is not lost
-- either. In REPEATABLE READ or SERIALIZABLE the writer's snapshot is older
-- than its lock: it wakes the owner it sees, idle or not.

-- The wake lock of a shard: one of 64 per group, so that a runner goes idle
-- with 64 locks per group it serves, however many shards it owns.
CREATE FUNCTION cairn.wake_lock(p_group text, p_shard integer) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('cairn.wake:' || p_group || ':' || (p_shard % 64)::text, 0)
$$;

-- Sets runner p_runner idle if no writer holds a wake lock of its groups
-- (of its shards, and of others': a writer there defers it for nothing but
-- a moment); true if it did (or it was idle), false if it stays busy.
CREATE FUNCTION cairn.go_idle(p_runner bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_lock bigint;
BEGIN
    FOR v_lock IN
        SELECT cairn.wake_lock(g, b) FROM cairn.runners r, unnest(r.groups) g,
            generate_series(0, 63) b
        WHERE r.id = p_runner
    LOOP
        IF NOT pg_try_advisory_xact_lock(v_lock) THEN
            RETURN false;
        END IF;
    END LOOP;
    UPDATE cairn.runners SET idle = true WHERE id = p_runner AND NOT idle;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION cairn.wake(p_group text, p_shard integer, p_run bigint, p_cancel boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner bigint;
    v_kind text := CASE WHEN p_cancel THEN '/cancel' ELSE '' END;
    v_tag text := pg_current_xact_id()::text || ':';
    v_seen text := coalesce(current_setting('cairn.woken', true), '');
    v_any boolean := p_cancel OR current_setting('transaction_isolation') <> 'read committed';
BEGIN
    PERFORM pg_advisory_xact_lock_shared(cairn.wake_lock(p_group, p_shard));
    SELECT l.owner INTO v_owner FROM cairn.shard_leases l
      JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR v_any)
     WHERE l.shard_group = p_group AND l.shard = p_shard;
    IF v_owner IS NULL THEN
        RETURN;
    END IF;
    IF left(v_seen, length(v_tag)) <> v_tag THEN
        v_seen := v_tag || ',';
    END IF;
    IF strpos(v_seen, ',' || v_owner || v_kind || ',') > 0 THEN
        PERFORM pg_notify('cairn_wake', v_owner || v_kind);
    ELSE
        PERFORM pg_notify('cairn_wake', v_owner || v_kind || ' ' || p_run);
        PERFORM set_config('cairn.woken', v_seen || v_owner || v_kind || ',', false);
    END IF;
END
$$;

-- The C client's release of held runs and the scheduler now call cairn.wake
-- with their own rights, which need not be the migrating user's. It runs
-- with its caller's rights (the SQL API's functions call it as theirs), so a
-- role that may not read cairn.shard_leases and cairn.runners gets nothing
-- from it but a permission error.
GRANT EXECUTE ON FUNCTION cairn.wake(text, integer, bigint, boolean) TO PUBLIC;
