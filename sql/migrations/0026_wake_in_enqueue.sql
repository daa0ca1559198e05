-- 0026: the C client's enqueue wakes an idle owner from its own transaction.
--
-- Until now the C client's enqueue of one run committed its INSERT and then,
-- in a transaction of its own sent in the same round trip, read the run's
-- owner and notified it (client.c, ST_WAKE_TO). That second transaction
-- came after the INSERT's commit, so the wake relay heard of the run 0.31
-- to 0.56 ms after it was on disk (measured on the bench's stamp phase): a
-- third of the time from an enqueue to its run's first instruction at low
-- load, beyond the enqueue's own commit. A notification sent inside the
-- INSERT's transaction reaches the relay as the commit does.
--
-- It was not sent there because PostgreSQL serialises the commits of
-- notifying transactions on one lock, held until the commit is on disk:
-- writers that all notified would each wait for the disk in turn, with no
-- group commit between them. So the enqueue notifies from inside its
-- transaction only when it is the one writer doing so (a transaction lock
-- it tries to take and does not wait for, cairn.notify_lock); else, as
-- before, the wake-up after its commit does it. A busy owner is not
-- notified at all, as before (runners.idle), and its writers take no lock.
--
-- The owner is read as cairn.wake reads it (migrations 0015 and 0025: in
-- the shard's part): after a shared
-- wake lock of the shard, in a statement of its own, so that an owner that
-- goes idle after the read waits for this commit and claims again. That
-- holds in READ COMMITTED only (a later isolation level's snapshot is older
-- than the lock): there it leaves the wake-up to after the commit.

-- The lock that lets one writer at a time notify from inside its
-- transaction (an advisory lock of the transaction, never waited for).
CREATE FUNCTION cairn.notify_lock() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('cairn.notify', 0)
$$;

-- Wakes the idle owner of shard p_shard of group p_group for run p_run from
-- inside the caller's transaction (its notification goes out as that
-- commits), and records that it did (or that there was no idle owner to
-- wake) as the session's setting cairn.woke = p_token, which the wake-up
-- sent after the commit reads to skip its work. Returns whether it did:
-- false when another writer holds cairn.notify_lock or the transaction is
-- not READ COMMITTED; the wake-up after the commit wakes the owner then.
CREATE FUNCTION cairn.wake_in(p_group text, p_shard integer, p_run bigint, p_token text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_owner bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(cairn.wake_lock(p_group, p_shard));
    SELECT l.owner INTO v_owner FROM cairn.shard_leases l
      JOIN cairn.runners w ON w.id = l.owner AND w.idle
     WHERE l.part = cairn.part_of(p_shard) AND l.shard_group = p_group AND l.shard = p_shard;
    IF v_owner IS NOT NULL THEN
        IF NOT pg_try_advisory_xact_lock(cairn.notify_lock()) THEN
            RETURN false;
        END IF;
        PERFORM pg_notify('cairn_wake', v_owner || ' ' || p_run);
    END IF;
    PERFORM set_config('cairn.woke', p_token, false);
    RETURN true;
END
$$;

GRANT EXECUTE ON FUNCTION cairn.notify_lock() TO PUBLIC;
GRANT EXECUTE ON FUNCTION cairn.wake_in(text, integer, bigint, text) TO PUBLIC;
