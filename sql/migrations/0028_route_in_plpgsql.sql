-- 0028: routing and the SQL API's enqueue run on Citus.
--
-- Citus plans no SQL-language function that reads a distributed or a
-- reference table ("parameterized queries for SQL functions referencing
-- distributed tables are not supported"), even called with constants: so
-- cairn.route (migration 0020), which reads cairn.workflows (a reference
-- table), failed there, and with it every statement that routes in SQL:
-- the SQL API's cairn.enqueue, inside an application's transaction on the
-- coordinator, and the client's statements that call it. A PL/pgSQL
-- function's statements are planned one by one, each as a statement of its
-- own, and Citus plans a read of a reference table on the coordinator. So
-- cairn.route is now PL/pgSQL, the same on both deployments; it answers as
-- before. One server loses its inlining of the SQL function into the
-- statement that calls it; the C client calls it once a second per route
-- (route_cached), and the SQL API's enqueue already called it from
-- PL/pgSQL.
CREATE OR REPLACE FUNCTION cairn.route(p_workflow text, p_group text DEFAULT NULL,
    p_prefer text DEFAULT NULL, p_require boolean DEFAULT false)
RETURNS TABLE (shard_group text, warning text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_served text; -- the group that serves the workflow (NULL: never served)
BEGIN
    SELECT w.shard_group INTO v_served FROM cairn.workflows w
     WHERE w.workflow = p_workflow
     ORDER BY w.shard_group = p_group DESC NULLS LAST,
              w.live_until > now() DESC,
              w.shard_group = p_prefer DESC NULLS LAST,
              CASE WHEN w.live_until > now() THEN NULL ELSE w.last_seen END DESC NULLS FIRST,
              w.shard_group = 'default' DESC, w.shard_group
     LIMIT 1;
    shard_group := coalesce(p_group, v_served, p_prefer, 'default');
    IF v_served IS DISTINCT FROM shard_group THEN
        warning := cairn.unserved(p_workflow, shard_group, v_served, p_require);
    END IF;
    RETURN NEXT;
END
$$;

-- The active runs of concurrency key p_key of p_workflow (as
-- cairn.flow_active counts them), read in p_part, the part of the key's
-- shard, where every run of the key lives: on Citus one task on the node
-- of the part (cairn.flow_active reads every part, and as a SQL function
-- Citus refuses it). PL/pgSQL for the same reason as cairn.route.
CREATE FUNCTION cairn.flow_active_in(p_part integer, p_workflow text, p_key text)
RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*)::integer FROM cairn.runs
             WHERE part = p_part AND workflow = p_workflow AND concurrency_key = p_key
               AND finished_at IS NULL AND NOT held
               AND (status = 'running' OR (status = 'pending' AND start_at <= now())));
END
$$;
GRANT EXECUTE ON FUNCTION cairn.flow_active_in(integer, text, text) TO PUBLIC;

-- The SQL API's enqueue (migration 0023, as 0025 left it) counts a
-- concurrency key's active runs in the key's part: its definition as the
-- server holds it, with that call replaced (its rights, settings and
-- grants stay as they are).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, '
                         'text, text, integer, boolean, text)';
    v_def text := pg_get_functiondef(v_fn);
    v_flow text := 'cairn.flow_active(workflow, concurrency_key)';
BEGIN
    IF strpos(v_def, v_flow) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue does not count a key''s runs as migration 0023 did';
    END IF;
    v_def := replace(v_def, v_flow,
                     'cairn.flow_active_in(cairn.part_of(v_shard), workflow, concurrency_key)');
    EXECUTE v_def;
END
$$;

-- The owners of new runs p_runs, each in part p_parts (the same order),
-- woken after the write that made them committed (cairn.wake_runs for
-- each part): the C client's wake-up after a batch on a database with
-- parts. Returns how many runs it looked at.
CREATE FUNCTION cairn.wake_new(p_runs bigint[], p_parts integer[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_part integer;
    v_n integer := 0;
BEGIN
    FOR v_part IN SELECT DISTINCT p FROM unnest(p_parts) p ORDER BY p LOOP
        v_n := v_n + cairn.wake_runs(ARRAY(SELECT x.r FROM unnest(p_runs, p_parts) AS x(r, p)
                                          WHERE x.p = v_part), v_part, false);
    END LOOP;
    RETURN v_n;
END
$$;
GRANT EXECUTE ON FUNCTION cairn.wake_new(bigint[], integer[]) TO PUBLIC;

-- cairn.children_sync (migration 0021, as 0025 left it) writes child_waits
-- and child_awaited in the part of their parent (the run that waits):
-- they wrote part 0, which on Citus the foreign key of child_waits on
-- (run_id, part) refuses for a parent in any other part. It now works part
-- by part, over the parts of the parents it is given (their runs' rows), in
-- part order, and every statement names its part: on Citus each is one
-- task on the node of the part, where a lock (FOR UPDATE) with no filter
-- on the part was refused. On one server there is one part: one pass, the
-- statements of before. Locks are still taken in one order, (part, run),
-- so two commits cannot deadlock on them. What it does is otherwise as
-- migration 0021 says.
CREATE OR REPLACE FUNCTION cairn.children_sync(p_ok bigint[],
                                               w_run bigint[], w_seq integer[], w_want integer[],
                                               a_run bigint[], a_child bigint[],
                                               e_run bigint[], e_child bigint[], e_parent bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part integer;
    v_runs bigint[]; -- the parents (waiting runs, parents of ended children) in v_part
BEGIN
    SELECT array_agg(x.r), array_agg(x.q), array_agg(x.k) INTO w_run, w_seq, w_want
        FROM unnest(w_run, w_seq, w_want) AS x(r, q, k) JOIN unnest(p_ok) o(id) ON o.id = x.r;
    SELECT array_agg(x.r), array_agg(x.c) INTO a_run, a_child
        FROM unnest(a_run, a_child) AS x(r, c) JOIN unnest(w_run) o(id) ON o.id = x.r;
    SELECT array_agg(x.c), array_agg(x.p) INTO e_child, e_parent
        FROM unnest(e_run, e_child, e_parent) AS x(r, c, p) JOIN unnest(p_ok) o(id) ON o.id = x.r;
    IF w_run IS NULL AND e_parent IS NULL THEN
        RETURN;
    END IF;
    FOR v_part, v_runs IN
        SELECT r.part, array_agg(r.id ORDER BY r.id) FROM cairn.runs r
         WHERE r.id = ANY (coalesce(w_run, '{}') || coalesce(e_parent, '{}'))
         GROUP BY r.part ORDER BY r.part
    LOOP
        INSERT INTO cairn.child_waits (run_id, part)
            SELECT DISTINCT r, v_part FROM unnest(w_run) r WHERE r = ANY (v_runs) ORDER BY r
            ON CONFLICT ON CONSTRAINT child_waits_pkey DO NOTHING;
        PERFORM 1 FROM cairn.child_waits
            WHERE part = v_part AND run_id = ANY (v_runs)
            ORDER BY run_id FOR UPDATE;

        -- Ends: an awaited child counts down its parent's current wait.
        RETURN QUERY
        WITH gone AS (
            DELETE FROM cairn.child_awaited a USING unnest(e_child, e_parent) AS e(c, p)
            WHERE a.part = v_part AND a.child_id = e.c AND a.run_id = e.p
              AND e.p = ANY (v_runs)
            RETURNING a.run_id, a.seq),
        hit AS (
            SELECT g.run_id, count(*)::integer AS n FROM gone g
            JOIN cairn.child_waits w ON w.part = v_part AND w.run_id = g.run_id
                                    AND w.seq = g.seq
            GROUP BY g.run_id),
        down AS (
            UPDATE cairn.child_waits w SET need = w.need - hit.n FROM hit
            WHERE w.part = v_part AND w.run_id = hit.run_id
            RETURNING w.run_id, w.need, hit.n)
        SELECT run_id FROM down WHERE need <= 0 AND need + n > 0
        UNION
        SELECT p FROM unnest(e_parent) p
        WHERE p = ANY (v_runs)
          AND NOT EXISTS (SELECT 1 FROM cairn.child_waits w
                          WHERE w.part = v_part AND w.run_id = p);

        -- Waits: the children given that have ended (their signal is there,
        -- not taken) count at once; the others are awaited.
        RETURN QUERY
        WITH kid AS (
            SELECT DISTINCT a.r, a.c, EXISTS (
                       SELECT 1 FROM cairn.signals g
                       WHERE g.part = v_part AND g.run_id = a.r
                         AND g.name = 'cairn.child:' || a.c
                         AND g.consumed_by_seq IS NULL) AS ended
            FROM unnest(a_run, a_child) AS a(r, c) WHERE a.r = ANY (v_runs)),
        ended AS (
            SELECT r, count(*)::integer AS n FROM kid WHERE ended GROUP BY r),
        set_ AS (
            UPDATE cairn.child_waits w SET seq = x.q, need = x.k - coalesce(ended.n, 0)
            FROM unnest(w_run, w_seq, w_want) AS x(r, q, k) LEFT JOIN ended ON ended.r = x.r
            WHERE w.part = v_part AND w.run_id = x.r AND x.r = ANY (v_runs)
            RETURNING w.run_id, w.seq, w.need),
        mark AS (
            INSERT INTO cairn.child_awaited (child_id, run_id, seq, part)
            SELECT kid.c, kid.r, s.seq, v_part FROM kid JOIN set_ s ON s.run_id = kid.r
            WHERE NOT kid.ended AND s.need > 0
            ON CONFLICT ON CONSTRAINT child_awaited_pkey
            DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq)
        SELECT run_id FROM set_ WHERE need <= 0;
    END LOOP;
END $$;

-- cairn.flow_release (migration 0010) reads and writes a concurrency key's
-- runs in their part (every run of a key lives in the part of the key's
-- shard), found from one of its held runs: on Citus its lock of the held
-- runs (FOR UPDATE) and its update are one task on the node of the part,
-- where they were refused with no filter on the part, and the count of the
-- key's active runs is cairn.flow_active_in's. A key with no held run has
-- nothing to let go, and returns before counting. Otherwise as 0010 says.
CREATE OR REPLACE FUNCTION cairn.flow_release(p_workflow text, p_key text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_part integer;
    v_free integer;
    v_ids bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(cairn.flow_lock(p_workflow, p_key));
    SELECT part INTO v_part FROM cairn.runs
     WHERE workflow = p_workflow AND concurrency_key = p_key AND held LIMIT 1;
    IF v_part IS NULL THEN
        RETURN '{}';
    END IF;
    v_free := greatest(cairn.flow_cap(p_workflow)
                       - cairn.flow_active_in(v_part, p_workflow, p_key), 0);
    IF v_free = 0 THEN
        RETURN '{}';
    END IF;
    WITH go AS (
        SELECT id FROM cairn.runs
        WHERE part = v_part AND workflow = p_workflow AND concurrency_key = p_key AND held
        ORDER BY priority DESC, id LIMIT v_free
        FOR UPDATE),
    up AS (
        UPDATE cairn.runs r SET held = false, start_at = r.scheduled_at, updated_at = now()
        FROM go WHERE r.part = v_part AND r.id = go.id
        RETURNING r.id)
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids FROM up;
    RETURN v_ids;
END;
$$;
