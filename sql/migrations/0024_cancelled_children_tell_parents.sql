-- 0024: a child that is cancelled before it starts tells its parent.
--
-- A run ends in one of two places: the commit of its worker (commit.c),
-- which sends a child's outcome to its parent and counts down the parent's
-- wait (cairn.children_sync, migration 0021), and a cancel of a run that
-- has not started (cairn_cancel in client.c, cairn.cancel below), which
-- ends it at once, with no worker. Until now the second told nobody: a
-- parent waiting for that child (cairn_child_wait, _wait_all, _any) waited
-- for ever. cairn.children_ended is what a commit's FINISH of a child does,
-- for runs that ended outside a commit, in the statement that ends them.

-- Runs that ended (their ends are the caller's statement's, which locked
-- their rows), the child each is (the first run of its chain: the run its
-- parent started) and their parents, with their statuses and errors: each
-- parent that has not finished gets the signal cairn.child:CHILD with
-- {"status", "output": null, "error"}, its wait is counted down
-- (cairn.children_sync), and the parents whose waits are now met get a
-- message and their owners a wake-up (cairn.wake, when idle). Returns how
-- many parents it woke.
CREATE FUNCTION cairn.children_ended(e_run bigint[], e_child bigint[], e_parent bigint[],
                                     e_status text[], e_error text[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_woken integer;
BEGIN
    IF coalesce(cardinality(e_run), 0) = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO cairn.signals (run_id, name, payload)
    SELECT p.id, 'cairn.child:' || x.c,
           jsonb_build_object('status', x.st, 'output', NULL, 'error', x.er)
    FROM unnest(e_run, e_child, e_parent, e_status, e_error) AS x(r, c, pa, st, er)
    JOIN cairn.runs p ON p.id = x.pa
    WHERE p.finished_at IS NULL;
    WITH m AS (
        INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
        SELECT p.id, p.shard_group, p.shard, 'signal'
        FROM cairn.children_sync(e_run, '{}', '{}', '{}', '{}', '{}', e_run, e_child, e_parent)
             AS w(id)
        JOIN cairn.runs p ON p.id = w.id AND p.finished_at IS NULL
        RETURNING run_id, shard_group, shard)
    SELECT count(cairn.wake(shard_group, shard, run_id, false)) INTO v_woken FROM m;
    RETURN v_woken;
END
$$;

-- cairn.cancel (the SQL API) of a run that has not started tells its
-- parent, as cairn_cancel does.
CREATE OR REPLACE FUNCTION cairn.cancel(run bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    r cairn.runs := cairn.live_for_update(run);
BEGIN
    IF r.finished_at IS NOT NULL THEN
        PERFORM cairn.wrong_state('cancel', run, 'it has already finished');
    END IF;
    IF r.status = 'pending' AND r.attempt = 0 THEN
        UPDATE cairn.runs SET status = 'cancelled', error = 'cancelled', cancel_requested = true,
               finished_at = now(), updated_at = now(), start_at = NULL,
               held = false
         WHERE id = r.id;
        DELETE FROM cairn.messages WHERE run_id = r.id;
        PERFORM pg_notify('cairn_done', r.id::text);
        IF r.parent_id IS NOT NULL THEN
            PERFORM cairn.children_ended(ARRAY[r.id], ARRAY[coalesce(r.chain_id, r.id)],
                                         ARRAY[r.parent_id], '{cancelled}', '{cancelled}');
        END IF;
    ELSE
        UPDATE cairn.runs SET cancel_requested = true, updated_at = now() WHERE id = r.id;
        INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
        VALUES (r.id, r.shard_group, r.shard, 'cancel');
    END IF;
    PERFORM cairn.wake(r.shard_group, r.shard, r.id, true);
END
$$;
