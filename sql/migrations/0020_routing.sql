-- 0020: routing by workflow. Workers record the workflows they serve, and
-- a run enqueued without a group goes to a group whose workers serve its
-- workflow, so C, Python and TypeScript workers share one database without
-- settings (docs/sdks.md, "Routing by workflow").
--
-- cairn.runner_workflows says what each registered runner serves: one row
-- per (runner, group, workflow), written with the runner's row and deleted
-- with it. cairn.workflows is the durable memory of what was ever served,
-- one row per (workflow, group): so "never served" can be told from "served,
-- but no worker is live right now" (a deploy). Its live_until is the time
-- until which a worker of the group that serves it is taken to be live:
-- the runners refresh it (with last_seen) every 15 s while they live, at
-- most once per 7.5 s for all of them, to now() + 30 s + their TTL, and cut
-- it short when they see the last live runner that served it go (a clean
-- stop, or a crash noticed through the membership). Reading it is what
-- lets an enqueue route with one index lookup, without pg_stat_activity.

CREATE TABLE cairn.workflows (
    workflow    text NOT NULL,
    shard_group text NOT NULL,
    runtime     text NOT NULL,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    live_until  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, shard_group)
);

CREATE TABLE cairn.runner_workflows (
    runner_id   bigint NOT NULL REFERENCES cairn.runners (id) ON DELETE CASCADE,
    shard_group text NOT NULL,
    workflow    text NOT NULL,
    runtime     text NOT NULL,
    PRIMARY KEY (runner_id, shard_group, workflow)
);
CREATE INDEX runner_workflows_workflow ON cairn.runner_workflows (workflow, shard_group);

-- An age as a person reads it: 12s, 5m, 3h, 2d.
CREATE FUNCTION cairn.age_text(a interval) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN s < 60 THEN s || 's' WHEN s < 3600 THEN s / 60 || 'm'
                WHEN s < 86400 THEN s / 3600 || 'h' ELSE s / 86400 || 'd' END
    FROM (SELECT greatest(floor(extract(epoch FROM a)), 0)::bigint AS s) x
$$;

-- What an enqueue says of a run whose group (p_group) has never served its
-- workflow: a warning, or with p_require the refusal (no_data_found, as a
-- missing run). p_other is a group that has served it, or NULL: none ever.
CREATE FUNCTION cairn.unserved(p_workflow text, p_group text, p_other text, p_require boolean)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_what text := CASE WHEN p_other IS NULL
        THEN format('no worker has ever served workflow "%s"', p_workflow)
        ELSE format('group "%s" has never served workflow "%s" (group "%s" has)', p_group,
                    p_workflow, p_other) END;
BEGIN
    IF p_require THEN
        RAISE EXCEPTION '%: refused (require_served), nothing was enqueued', v_what
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v_what || CASE WHEN p_other IS NULL
        THEN format(': the run waits in group "%s" until one does', p_group)
        ELSE ': the run moves to a group with a live worker that serves it' END
        || ', and fails if none does within CAIRN_UNKNOWN_WORKFLOW_TIMEOUT after it is due';
END
$$;

-- The group of a new run of p_workflow, the one place every enqueue routes
-- (the C client's statements, cairn.enqueue, and through them the HTTP
-- API, the CLI, children and runs started from a workflow):
--   - p_group when the caller names one;
--   - else the group that serves the workflow: one with a live worker first
--     (p_prefer among those: a child's parent's group), then the most
--     recently seen; among equals 'default', then the lowest name;
--   - else (never served) p_prefer, or 'default'.
-- warning is set when the group chosen has never served the workflow
-- (cairn.unserved), which with p_require refuses instead. One index range
-- of cairn.workflows (its rows of the workflow, usually one); a SQL
-- function, so the planner inlines it into the statement that calls it.
CREATE FUNCTION cairn.route(p_workflow text, p_group text DEFAULT NULL,
    p_prefer text DEFAULT NULL, p_require boolean DEFAULT false)
RETURNS TABLE (shard_group text, warning text)
LANGUAGE sql STABLE AS $$
    SELECT x.g, CASE WHEN x.s IS DISTINCT FROM x.g
                     THEN cairn.unserved(p_workflow, x.g, x.s, p_require) END
    FROM (SELECT coalesce(p_group, s.g, p_prefer, 'default') AS g, s.g AS s
          FROM (SELECT 1) one LEFT JOIN LATERAL (
              SELECT w.shard_group AS g FROM cairn.workflows w
              WHERE w.workflow = p_workflow
              ORDER BY w.shard_group = p_group DESC NULLS LAST,
                       w.live_until > now() DESC,
                       w.shard_group = p_prefer DESC NULLS LAST,
                       CASE WHEN w.live_until > now() THEN NULL ELSE w.last_seen END
                           DESC NULLS FIRST,
                       w.shard_group = 'default' DESC, w.shard_group
              LIMIT 1) s ON true) x
$$;

-- Where a run of p_workflow in group p_group goes when that group has no
-- live worker that serves it: a group other than p_group with a live,
-- healthy runner (as the workers judge it: TTL p_ttl_ms) that serves it,
-- 'default' first, then the lowest name; NULL when there is none. The
-- claim of such a run (exec.c) and the janitor's pass over stranded runs
-- (maint.c) both move runs by it.
CREATE FUNCTION cairn.reroute_target(p_workflow text, p_group text, p_ttl_ms bigint)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT rw.shard_group FROM cairn.runner_workflows rw
      JOIN cairn.runners r ON r.id = rw.runner_id
     WHERE rw.workflow = p_workflow AND rw.shard_group <> p_group AND r.healthy
       AND cairn.runner_live(r, p_ttl_ms)
     GROUP BY rw.shard_group
     ORDER BY rw.shard_group = 'default' DESC, rw.shard_group
     LIMIT 1
$$;

-- What serves runs of p_workflow in group p_group, for `cairn status` and
-- the console: the runtime (of the group, else of the group that served
-- it last; NULL: never served), and, when no worker of the group is live
-- (live_until), why the run waits, in words.
CREATE FUNCTION cairn.served_by(p_workflow text, p_group text)
RETURNS TABLE (runtime text, unserved text)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(h.runtime, a.runtime),
           CASE WHEN h.live_until > now() THEN NULL
                WHEN a.live_until > now() THEN format(
                    'no live worker of group "%s" serves workflow "%s": the run moves to '
                    'group "%s", which has one', p_group, p_workflow, a.shard_group)
                WHEN a.workflow IS NULL THEN format(
                    'no live worker serves workflow "%s" (never served)', p_workflow)
                ELSE format('no live worker serves workflow "%s" (last seen %s ago in group %s)',
                            p_workflow, cairn.age_text(now() - a.last_seen), a.shard_group)
           END
    FROM (SELECT 1) one
    LEFT JOIN cairn.workflows h ON h.workflow = p_workflow AND h.shard_group = p_group
    LEFT JOIN LATERAL (SELECT * FROM cairn.workflows w WHERE w.workflow = p_workflow
                       ORDER BY w.live_until > now() DESC, w.last_seen DESC
                       LIMIT 1) a ON true
$$;

-- The SQL API's enqueue routes too: shard_group NULL (now the default)
-- picks the group by cairn.route, the result has a warning, and
-- require_served refuses a workflow never served. The old signatures are
-- dropped and made again with the new parameter at the end, so calls by
-- position or by name keep working; `SELECT id FROM cairn.enqueue(...)`
-- and `(cairn.enqueue(...)).id` read as before.
DROP FUNCTION cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer);
DROP FUNCTION cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer);

-- Enqueues a run of workflow (cairn_enqueue): the same (workflow, key)
-- twice returns the first run with existed = true. key NULL: a fresh one
-- (cairn.fresh_key). delay or run_at (not both): when it starts;
-- max_attempts NULL: 3; shard_group NULL: routed (cairn.route).
CREATE FUNCTION cairn.enqueue(workflow text, input jsonb DEFAULT 'null', key text DEFAULT NULL,
    delay interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL, shard_group text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, priority integer DEFAULT 0,
    require_served boolean DEFAULT false,
    OUT id bigint, OUT existed boolean, OUT warning text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    v_key text := coalesce(key, cairn.fresh_key());
    v_input jsonb := coalesce(input, 'null');
    v_at timestamptz;
    v_shard integer;
    v_held boolean;
    v_group text;
    v_warning text;
    v_kept text[];
    v_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
    PERFORM cairn.check_name('workflow', workflow);
    PERFORM cairn.check_key(v_key);
    IF shard_group IS NOT NULL THEN
        PERFORM cairn.check_name('group', shard_group);
    END IF;
    PERFORM cairn.check_json('input', v_input);
    IF concurrency_key IS NOT NULL THEN
        BEGIN
            PERFORM cairn.check_key(concurrency_key);
        EXCEPTION WHEN invalid_parameter_value THEN
            PERFORM cairn.invalid('concurrency_key: ' || SQLERRM);
        END;
    END IF;
    IF priority IS NULL OR priority < -1000 OR priority > 1000 THEN
        PERFORM cairn.invalid(format(
            'invalid priority %s: expected an integer from -1000 to 1000 (higher starts first)',
            coalesce(priority::text, 'NULL')));
    END IF;
    IF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 1000) THEN
        PERFORM cairn.invalid(format('invalid max_attempts %s: expected an integer from 1 to 1000',
                                     max_attempts));
    END IF;
    IF delay < interval '0' THEN
        PERFORM cairn.invalid(format('invalid delay %s: expected an interval of 0 or more',
                                     delay));
    END IF;
    IF delay IS NOT NULL AND run_at IS NOT NULL THEN
        PERFORM cairn.invalid(format(
            'delay (%s) and run_at (%s) cannot be used together: set at most one of them',
            delay, run_at));
    END IF;
    v_at := coalesce(run_at, now() + coalesce(delay, interval '0'));
    -- As cairn.shards_per_group(), read here: a call of it costs more than the read.
    v_shard := cairn.shard_of(coalesce(concurrency_key, v_key), (SELECT value::integer FROM cairn.settings
                                       WHERE name = 'shards_per_group'));
    IF v_shard IS NULL THEN
        PERFORM cairn.shards_per_group(); -- raises: not recorded
    END IF;
    -- Held when its key's slots look full, as the client's enqueue does; the
    -- key's lock is not taken inside the caller's transaction (a worker
    -- would wait for the caller's commit), so a slot freed before this
    -- commits lets the run go at the owner's next sweep.
    v_held := concurrency_key IS NOT NULL
        AND cairn.flow_active(workflow, concurrency_key) >= cairn.flow_cap(workflow);
    -- Routed as a C client routes: by cairn.route, whose answer the session
    -- keeps for a second (cairn.route_kept), so that a session that
    -- enqueues one workflow again and again reads cairn.workflows once a
    -- second, not at every run (it cost a call 15 to 20 us of CPU).
    v_kept := string_to_array(current_setting('cairn.route_kept', true), E'\x1f');
    IF cardinality(v_kept) = 5 AND v_kept[2] = workflow
       AND v_kept[3] = coalesce(shard_group, '') AND v_kept[1]::bigint > v_ms
       AND NOT (coalesce(require_served, false) AND v_kept[5] <> '') THEN
        v_group := v_kept[4];
        v_warning := nullif(v_kept[5], '');
    ELSE
        SELECT rt.shard_group, rt.warning INTO v_group, v_warning
          FROM cairn.route(workflow, shard_group, NULL, coalesce(require_served, false)) rt;
        PERFORM set_config('cairn.route_kept', concat_ws(E'\x1f', v_ms + 1000, workflow,
                           coalesce(shard_group, ''), v_group, coalesce(v_warning, '')), false);
    END IF;
    INSERT INTO cairn.runs AS r (workflow, key, shard_group, shard, input, max_attempts,
                                 scheduled_at, start_at, concurrency_key, priority, held)
    VALUES (workflow, v_key, v_group, v_shard, v_input, coalesce(max_attempts, 3),
            v_at, CASE WHEN v_held THEN NULL ELSE v_at END, concurrency_key, priority, v_held)
    ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING
    RETURNING r.id INTO id;
    IF id IS NOT NULL THEN
        existed := false;
        warning := v_warning;
        IF NOT v_held THEN
            PERFORM cairn.wake(v_group, v_shard, id, false);
        END IF;
        RETURN;
    END IF;
    -- In READ COMMITTED this statement sees the run the INSERT waited for.
    SELECT r.id INTO id FROM cairn.runs r WHERE r.workflow = enqueue.workflow AND r.key = v_key;
    IF id IS NULL THEN
        RAISE EXCEPTION 'enqueue raced with a concurrent enqueue; try again'
            USING ERRCODE = 'serialization_failure';
    END IF;
    existed := true;
END
$$;

-- The twin that takes the input as text (migration 0019).
CREATE FUNCTION cairn.enqueue(workflow text, input text, key text DEFAULT NULL,
    delay interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL, shard_group text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, priority integer DEFAULT 0,
    require_served boolean DEFAULT false,
    OUT id bigint, OUT existed boolean, OUT warning text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM cairn.enqueue(workflow, cairn.json_arg('input', input), key, delay, run_at,
                                max_attempts, shard_group, concurrency_key, priority,
                                require_served)
$$;

REVOKE EXECUTE ON FUNCTION
    cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer, boolean),
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer, boolean),
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer, boolean)
    TO cairn_client;
