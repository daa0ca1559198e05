-- 0030: at low load, an enqueue hands its run to the idle owner of its shard.
--
-- Since migration 0026 the C client's enqueue of one run notifies an idle
-- owner from inside its own transaction (cairn.wake_in), and the owner then
-- claimed the run (dispatch.c, SQL_CLAIM_NEW): a transaction of its own,
-- which timed hop by hop on the bench's stamp phase was most of what came
-- after the enqueue's commit before the run's first instruction (0.5 to
-- 0.6 ms of it, against 0.1 ms for the relay's hop and the executor's).
-- Now the enqueue claims the run for that owner as it inserts it: the row
-- is written already running, counted (claims 1: the owner will start it
-- at once, as a claim counts a run it starts) and named as handed to that
-- owner (queued_by, with no queued_seq), and the notification carries what
-- a claim would have returned of the run, so the owner starts it with no
-- statement at all (engine/maint.c, dispatch.c). A notification that cannot
-- carry it (an input too large for a notification's payload), or one the
-- relay sends to another worker, names the run only, and the owner then
-- claims it by id as before (SQL_CLAIM_NEW takes a run handed to it).
-- A run whose hand-over is lost (the owner dies first, the relay misses the
-- notification) is still due by its start (start_at): the next claim of
-- its shard takes it, as it takes any run a dead worker had claimed.
--
-- The owner is read as cairn.wake_in reads it, before the INSERT, after a
-- shared wake lock of the shard (an owner going idle after the read waits
-- for this commit and claims again), in READ COMMITTED only. A run is
-- handed over only when the owner is idle, when no fleet-wide limit
-- exists (cairn.limits: a handed-over run would take no slot), and when
-- this writer gets cairn.notify_lock (0026: one writer at a time notifies
-- from inside its transaction). Returns the owner and its lease's epoch to
-- hand the run to (both NULL: none), and whether the wake-up after the
-- commit has nothing to do (no idle owner, or the run handed over).
CREATE FUNCTION cairn.push_owner(p_group text, p_shard integer,
                                 OUT owner bigint, OUT epoch bigint, OUT settled boolean)
LANGUAGE plpgsql AS $$
BEGIN
    settled := false;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(cairn.wake_lock(p_group, p_shard));
    SELECT l.owner, l.epoch INTO owner, epoch FROM cairn.shard_leases l
      JOIN cairn.runners w ON w.id = l.owner AND w.idle
     WHERE l.part = cairn.part_of(p_shard) AND l.shard_group = p_group AND l.shard = p_shard;
    IF owner IS NULL THEN
        settled := true;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM cairn.limits)
       OR NOT pg_try_advisory_xact_lock(cairn.notify_lock()) THEN
        owner := NULL;
        epoch := NULL;
        RETURN;
    END IF;
    settled := true;
END
$$;

GRANT EXECUTE ON FUNCTION cairn.push_owner(text, integer) TO PUBLIC;

-- The key that authenticates a hand-over's notification: any role may
-- notify on cairn_wake, so the claim a notification carries is started by
-- the owner only with a MAC made with this key, which only the schema's
-- owner reads (cairn.pushed, the workers). 256 bits from PostgreSQL's
-- strong random source (gen_random_uuid).
CREATE TABLE cairn.push_key (key bytea NOT NULL);
REVOKE ALL ON cairn.push_key FROM PUBLIC;
INSERT INTO cairn.push_key
SELECT sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text
                         || gen_random_uuid()::text, 'UTF8'));

-- After the INSERT of run p_run: if this transaction inserted it handed
-- over (running, counted once, queued_by its owner), notifies that owner
-- with the run's id and, when it fits in a notification (8000 bytes), the
-- MAC of what the owner's claim would have returned (claimrow.h's CLAIM_*
-- columns, as a JSON array of strings; dispatch.c checks it) and that
-- claim; p_epoch is the owner's lease's epoch, as cairn.push_owner read
-- it. Then records in the session that the wake-up after the commit has
-- nothing to do (cairn.woke = p_token). SECURITY DEFINER for the key; it
-- builds the claim itself from a row its caller's transaction wrote, so a
-- caller can make it notify nothing but the claim of its own new run.
CREATE FUNCTION cairn.pushed(p_run bigint, p_epoch bigint, p_token text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r cairn.runs;
    v_claim text;
    v_key bytea;
BEGIN
    SELECT * INTO r FROM cairn.runs x
     WHERE x.id = p_run AND age(x.xmin) = 0 AND x.queued_by IS NOT NULL
       AND x.queued_seq IS NULL AND x.status = 'running' AND x.claims = 1;
    IF FOUND THEN
        v_claim := json_build_array(r.id::text, r.shard_group, r.shard::text, p_epoch::text,
            '{0}', r.workflow, r.status, r.input::text, r.attempt::text,
            r.max_attempts::text, 'f', ((extract(epoch FROM r.scheduled_at) * 1000)::bigint)::text,
            (ceil(extract(epoch FROM now()) * 1000)::bigint)::text, r.claims::text, '0',
            NULL, NULL, NULL, NULL, 't', r.parent_id::text, 'f', NULL, NULL, NULL, NULL,
            r.priority::text, '0', r.journal_cuts::text, coalesce(r.chain_id, r.id)::text,
            r.traceparent, ((extract(epoch FROM r.created_at) * 1000000)::bigint)::text)::text;
        IF octet_length(v_claim) < 7800 THEN
            SELECT key INTO v_key FROM cairn.push_key;
            v_claim := ' ' || encode(sha256(v_key || sha256(v_key || convert_to(v_claim, 'UTF8'))),
                                     'hex') || ' ' || v_claim;
        ELSE
            v_claim := '';
        END IF;
        PERFORM pg_notify('cairn_wake', r.queued_by || ' ' || r.id || v_claim);
    END IF;
    PERFORM set_config('cairn.woke', p_token, false);
    RETURN true;
END
$$;

GRANT EXECUTE ON FUNCTION cairn.pushed(bigint, bigint, text) TO PUBLIC;
