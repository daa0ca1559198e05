-- 0022: long journals and runs that continue as new (issue 39).
--
-- A worker keeps the journals of the runs it executed recently (a bounded
-- cache, engine/jcache.c), so that a claim loads only the entries after
-- what it has. Settled entries (completed, timed out) are never
-- overwritten; a journal only loses entries when a retry cuts it. So each
-- cut counts in the run's row (journal_cuts), and a worker uses what it
-- cached of a run only while the count is the one it read with it: every
-- statement that cuts a journal (a run retry in the commit, cairn_retry,
-- cairn.retry) adds one in the same statement.
ALTER TABLE cairn.runs ADD COLUMN journal_cuts integer NOT NULL DEFAULT 0;

-- A run that continues as new (cairn_continue_as_new) ends completed, and
-- its final commit inserts its successor: the same workflow, shard, limits
-- and parent, a fresh journal, keyed cairn.next:ID by the run it continues
-- (continued_from), so that no commit can insert two. chain_id is the
-- first run of the chain, on every later run: the chain's last run is its
-- newest (runs_chain), whatever links the janitor has removed, and the
-- janitor keeps the first run (its key names the chain) until the others
-- are gone. Runs that never continued have neither column set, and stay
-- out of both indexes.
ALTER TABLE cairn.runs ADD COLUMN continued_from bigint, ADD COLUMN chain_id bigint;
CREATE INDEX runs_chain ON cairn.runs (chain_id, id) WHERE chain_id IS NOT NULL;
CREATE INDEX runs_continued_from ON cairn.runs (continued_from)
    WHERE continued_from IS NOT NULL;

-- The last run of the chain of run p_run (p_run itself when it never
-- continued), or NULL when there is no such run.
CREATE FUNCTION cairn.chain_last(p_run bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT max(c.id) FROM cairn.runs c
                      WHERE c.chain_id = coalesce(r.chain_id, r.id)), r.id)
      FROM cairn.runs r WHERE r.id = p_run
$$;

-- The run a signal or cancel addressed to p_run is for, locked (FOR
-- UPDATE): the last of its chain. Each statement of a function sees the
-- latest commits, so a run that continued while this waited for its lock
-- is followed to its successor.
CREATE FUNCTION cairn.live_for_update(p_run bigint) RETURNS cairn.runs
LANGUAGE plpgsql AS $$
DECLARE
    r cairn.runs;
    v_run bigint := p_run;
BEGIN
    FOR i IN 1 .. 100 LOOP
        r := cairn.run_for_update(coalesce(cairn.chain_last(v_run), v_run));
        IF r.finished_at IS NULL OR cairn.chain_last(r.id) = r.id THEN
            RETURN r;
        END IF;
        v_run := r.id;
    END LOOP;
    RETURN r;
END
$$;

-- A signal to a run that continued goes to the last run of its chain.
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
     WHERE g.run_id = r.id AND g.consumed_by_seq IS NULL;
    IF v_pending >= v_cap THEN
        PERFORM cairn.wrong_state('signal', run, format(
            'it holds %s unconsumed signals; the limit (max_pending_signals in cairn.settings) is %s',
            v_pending, v_cap));
    END IF;
    INSERT INTO cairn.signals (run_id, name, payload) VALUES (r.id, name, v_payload);
    INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
    VALUES (r.id, r.shard_group, r.shard, 'signal');
    PERFORM cairn.wake(r.shard_group, r.shard, r.id, false);
END
$$;

-- So does a cancel.
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
    ELSE
        UPDATE cairn.runs SET cancel_requested = true, updated_at = now() WHERE id = r.id;
        INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
        VALUES (r.id, r.shard_group, r.shard, 'cancel');
    END IF;
    PERFORM cairn.wake(r.shard_group, r.shard, r.id, true);
END
$$;

-- A retry's cut counts (journal_cuts).
CREATE OR REPLACE FUNCTION cairn.retry(run bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    r cairn.runs := cairn.run_for_update(run);
    v_cut integer;
BEGIN
    IF r.status NOT IN ('failed', 'cancelled') THEN
        PERFORM cairn.wrong_state('retry', run, format(
            'it is %s, only failed or cancelled runs can be retried', r.status));
    END IF;
    SELECT coalesce(min(g), 0) INTO v_cut
      FROM generate_series(0, (SELECT coalesce(max(seq), -1) + 1 FROM cairn.steps
                                WHERE run_id = run)) g
     WHERE NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.run_id = run AND s.seq = g
                          AND s.status IN ('completed', 'timed_out'));
    UPDATE cairn.runs SET status = 'pending', attempt = 0, error = NULL, output = NULL,
           cancel_requested = false, finished_at = NULL, updated_at = now(),
           scheduled_at = now(), start_at = now(), claims = 0,
           journal_cuts = journal_cuts + 1
     WHERE id = run;
    DELETE FROM cairn.steps WHERE run_id = run AND seq >= v_cut;
    UPDATE cairn.signals SET consumed_by_seq = NULL
     WHERE run_id = run AND consumed_by_seq >= v_cut;
    PERFORM cairn.wake(r.shard_group, r.shard, run, false);
END
$$;

REVOKE EXECUTE ON FUNCTION cairn.chain_last(bigint), cairn.live_for_update(bigint) FROM PUBLIC;
