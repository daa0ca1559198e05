-- 0035: a cancel is one call in its run's part; the SQL API's cancel and
-- signal write and count in the run's part.
--
-- The client's cancel was one statement of CTEs: it locked the last run of
-- the chain, ended it at once when it had not started (its messages
-- dropped, its parent told, its waiters notified), else asked it to stop
-- (cancel_requested and a cancel message). On Citus each write in a CTE is
-- a subplan of its own, whose rows pass through the coordinator, and the
-- parent's part is another. The work of the run's own part is now the body
-- of cairn.cancel_in, a function of the part (PL/pgSQL, one statement a
-- table, as cairn.signal_in of migration 0034), which `cairn migrate
-- --citus` distributes by p_part, colocated with cairn.runs: Citus sends
-- the call whole to the node of the part (one task). The notification of
-- a run ended at once is sent by the client on the coordinator, where the
-- waiters listen, after the call.
--
-- A run that has not started and has a parent is the one case that writes
-- in two parts: its end must reach its parent in the same transaction (a
-- parent told later, or never if the client died between the two, would
-- wait for ever). cairn.cancel_in leaves such a run as it is and answers
-- 'tell' unless p_tell; the client then calls cairn.cancel_told, a
-- function of the coordinator that calls cairn.cancel_in with p_tell, then
-- cairn.children_ended for the parent (the end sealed by the client,
-- p_end) and notifies, in one transaction.
--
-- One row, none when the run does not exist: whether it refused (the run
-- has finished), how many rows it wrote, why it refused, what it did (the
-- run's status, 'cancelled' when it ended it at once, 'tell'), the run it
-- acted on (the last of the chain of p_run), and for a run ended at once
-- that has a parent, the parent and the child id the parent knows it by
-- (the first run of its chain).
CREATE FUNCTION cairn.cancel_in(p_run bigint, p_part integer, p_tell boolean)
RETURNS TABLE (refused boolean, written bigint, why text, outcome text, target bigint,
               parent bigint, child bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_last bigint;
    v_n bigint;
    r record;
BEGIN
    SELECT coalesce((SELECT max(c.id) FROM cairn.runs c
                      WHERE c.part = p_part AND c.chain_id = coalesce(x.chain_id, x.id)), x.id)
      INTO v_last
      FROM cairn.runs x WHERE x.part = p_part AND x.id = p_run;
    IF v_last IS NULL THEN
        RETURN;
    END IF;
    SELECT x.id, x.shard_group, x.shard, x.status, x.attempt, x.parent_id,
           coalesce(x.chain_id, x.id) AS chain, x.finished_at IS NOT NULL AS done
      INTO r
      FROM cairn.runs x WHERE x.part = p_part AND x.id = v_last FOR UPDATE;
    IF r.done THEN
        RETURN QUERY SELECT true, 0::bigint, 'it has already finished'::text, r.status, r.id,
                            NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF r.status = 'pending' AND r.attempt = 0 THEN
        IF r.parent_id IS NOT NULL AND NOT p_tell THEN
            RETURN QUERY SELECT false, 0::bigint, NULL::text, 'tell'::text, r.id, r.parent_id,
                                r.chain;
            RETURN;
        END IF;
        UPDATE cairn.runs SET status = 'cancelled', error = 'cancelled', cancel_requested = true,
               finished_at = now(), updated_at = now(), start_at = NULL, held = false
         WHERE part = p_part AND id = r.id;
        DELETE FROM cairn.messages WHERE part = p_part AND run_id = r.id;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        RETURN QUERY SELECT false, v_n + 1, NULL::text, 'cancelled'::text, r.id, r.parent_id,
                            CASE WHEN r.parent_id IS NULL THEN NULL ELSE r.chain END;
        RETURN;
    END IF;
    UPDATE cairn.runs SET cancel_requested = true, updated_at = now()
     WHERE part = p_part AND id = r.id;
    INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind)
    VALUES (r.id, p_part, r.shard_group, r.shard, 'cancel');
    RETURN QUERY SELECT false, 2::bigint, NULL::text, r.status, r.id, NULL::bigint, NULL::bigint;
END
$$;

-- The cancel of a run that has not started and has a parent (see above),
-- on the coordinator: cairn.cancel_in's row, after the parent was told.
CREATE FUNCTION cairn.cancel_told(p_run bigint, p_part integer, p_end text)
RETURNS TABLE (refused boolean, written bigint, why text, outcome text, target bigint,
               parent bigint, child bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM cairn.cancel_in(p_run, p_part, true) x;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v.outcome = 'cancelled' THEN
        PERFORM pg_notify('cairn_done', v.target::text);
        IF v.parent IS NOT NULL THEN
            PERFORM cairn.children_ended(ARRAY[v.target], ARRAY[v.child], ARRAY[v.parent],
                                         '{cancelled}', '{cancelled}', ARRAY[p_end]);
        END IF;
    END IF;
    RETURN QUERY SELECT v.refused, v.written, v.why, v.outcome, v.target, v.parent, v.child;
END
$$;

-- cairn.cancel (the SQL API, migration 0024) with each statement in the
-- run's part: its update and delete named the run by id alone, which
-- Citus runs over every shard of the table.
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
         WHERE part = r.part AND id = r.id;
        DELETE FROM cairn.messages WHERE part = r.part AND run_id = r.id;
        PERFORM pg_notify('cairn_done', r.id::text);
        IF r.parent_id IS NOT NULL THEN
            PERFORM cairn.children_ended(ARRAY[r.id], ARRAY[coalesce(r.chain_id, r.id)],
                                         ARRAY[r.parent_id], '{cancelled}', '{cancelled}');
        END IF;
    ELSE
        UPDATE cairn.runs SET cancel_requested = true, updated_at = now()
         WHERE part = r.part AND id = r.id;
        INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)
        VALUES (r.part, r.id, r.shard_group, r.shard, 'cancel');
    END IF;
    PERFORM cairn.wake(r.shard_group, r.shard, r.id, true);
END
$$;

-- cairn.signal (the SQL API, migrations 0022 and 0025) counts the run's
-- unconsumed signals in its part, not over every shard.
CREATE OR REPLACE FUNCTION cairn.signal(run bigint, name text, payload jsonb DEFAULT 'null')
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    r cairn.runs;
    v_payload jsonb := coalesce(payload, 'null');
    v_cap bigint := coalesce((SELECT value::bigint FROM cairn.settings
                               WHERE settings.name = 'max_pending_signals'), 1000);
    v_pending bigint;
BEGIN
    PERFORM cairn.check_name('signal name', name);
    PERFORM cairn.check_json('signal payload', v_payload);
    r := cairn.live_for_update(run);
    IF r.finished_at IS NOT NULL THEN
        PERFORM cairn.wrong_state('signal', run, 'it has already finished');
    END IF;
    SELECT count(*) INTO v_pending FROM cairn.signals g
     WHERE g.part = r.part AND g.run_id = r.id AND g.consumed_by_seq IS NULL;
    IF v_pending >= v_cap THEN
        PERFORM cairn.wrong_state('signal', run, format(
            'it holds %s unconsumed signals; the limit (max_pending_signals in cairn.settings) is %s',
            v_pending, v_cap));
    END IF;
    INSERT INTO cairn.signals (part, run_id, name, payload) VALUES (r.part, r.id, name, v_payload);
    INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)
    VALUES (r.part, r.id, r.shard_group, r.shard, 'signal');
    PERFORM cairn.wake(r.shard_group, r.shard, r.id, false);
END
$$;
