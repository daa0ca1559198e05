-- 0033: the SQL API reads and locks a run in its part.
--
-- cairn.signal, cairn.cancel and cairn.retry (migrations 0011, 0022, 0024,
-- 0025) lock the run they act on with cairn.run_for_update, through
-- cairn.live_for_update and cairn.chain_last for a chain of runs that
-- continued as new. Those read the run by its id alone, which Citus
-- refuses: a lock (FOR UPDATE) needs the distribution column ("could not
-- run distributed query with FOR UPDATE/SHARE commands"), and chain_last,
-- an SQL function that reads a distributed table, is not planned at all
-- ("could not create distributed plan"). Now each names the run's part,
-- which cairn.run_part gives: the part of the shard a run id carries
-- (cairn.new_run_id), or, for a run made before migration 0025 (an id
-- below first_placed_id, which carries no shard), the part its row names.
-- A chain stays in its first run's shard, so in its part. On one server
-- there is one part, and the statements are those of before with a filter
-- that every row passes.
CREATE FUNCTION cairn.run_part(p_run bigint) RETURNS integer
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_first bigint;
    v_part integer;
BEGIN
    SELECT value::bigint INTO v_first FROM cairn.settings WHERE name = 'first_placed_id';
    IF v_first IS NOT NULL AND p_run >= v_first THEN
        RETURN cairn.part_of((p_run % 65536)::integer);
    END IF;
    SELECT r.part INTO v_part FROM cairn.runs r WHERE r.id = p_run;
    RETURN coalesce(v_part, cairn.part_of(0));
END
$$;

CREATE OR REPLACE FUNCTION cairn.chain_last(p_run bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_part integer := cairn.run_part(p_run);
    v_last bigint;
BEGIN
    SELECT coalesce((SELECT max(c.id) FROM cairn.runs c
                      WHERE c.part = v_part AND c.chain_id = coalesce(r.chain_id, r.id)), r.id)
      INTO v_last
      FROM cairn.runs r WHERE r.part = v_part AND r.id = p_run;
    RETURN v_last;
END
$$;

CREATE OR REPLACE FUNCTION cairn.run_for_update(p_run bigint) RETURNS cairn.runs
LANGUAGE plpgsql AS $$
DECLARE
    r cairn.runs;
    v_part integer := cairn.run_part(p_run);
BEGIN
    SELECT * INTO r FROM cairn.runs WHERE part = v_part AND id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', coalesce(p_run::text, 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN r;
END
$$;

REVOKE EXECUTE ON FUNCTION cairn.run_part(bigint) FROM PUBLIC;

-- cairn.retry (migration 0022) with every statement in the run's part, and
-- the cut found from the journal's rows read once: Citus plans no
-- subquery per row of generate_series over a distributed table.
CREATE OR REPLACE FUNCTION cairn.retry(run bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    r cairn.runs := cairn.run_for_update(run);
    v_cut integer;
    v_end integer;
    v_done integer[];
BEGIN
    IF r.status NOT IN ('failed', 'cancelled') THEN
        PERFORM cairn.wrong_state('retry', run, format(
            'it is %s, only failed or cancelled runs can be retried', r.status));
    END IF;
    SELECT coalesce(max(s.seq), -1) + 1,
           coalesce(array_agg(s.seq) FILTER (WHERE s.status IN ('completed', 'timed_out')), '{}')
      INTO v_end, v_done
      FROM cairn.steps s WHERE s.part = r.part AND s.run_id = run;
    SELECT coalesce(min(g), 0) INTO v_cut
      FROM generate_series(0, v_end) g WHERE g <> ALL (v_done);
    UPDATE cairn.runs SET status = 'pending', attempt = 0, error = NULL, output = NULL,
           cancel_requested = false, finished_at = NULL, updated_at = now(),
           scheduled_at = now(), start_at = now(), claims = 0,
           journal_cuts = journal_cuts + 1
     WHERE part = r.part AND id = run;
    DELETE FROM cairn.steps WHERE part = r.part AND run_id = run AND seq >= v_cut;
    UPDATE cairn.signals SET consumed_by_seq = NULL
     WHERE part = r.part AND run_id = run AND consumed_by_seq >= v_cut;
    PERFORM cairn.wake(r.shard_group, r.shard, run, false);
END
$$;
