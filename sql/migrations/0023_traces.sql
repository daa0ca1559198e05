-- 0023: OpenTelemetry traces (issue 40).
--
-- A run keeps the W3C trace context it was enqueued with: the
-- traceparent of the caller's span (a client, POST /v1/runs, the SQL API,
-- or the parent run's durable call that started it). Every worker that
-- executes the run reads it with the claim, so the run's spans stay in the
-- caller's trace across crashes, hand-overs and replays (engine/trace.c
-- derives the span ids from the run). NULL: the run is the root of a trace
-- of its own, whose id is derived from the run's id and created_at. The
-- column has no default: adding it rewrites nothing, and a run enqueued
-- without one stores nothing more than before.
ALTER TABLE cairn.runs ADD COLUMN traceparent text;

-- traceparent as it is stored (version 00, lower case), or NULL for NULL;
-- anything else is refused, naming the value and what is accepted. A later
-- version's extra fields are dropped, as the W3C recommendation says a
-- version 00 parser does.
CREATE FUNCTION cairn.check_traceparent(traceparent text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF traceparent IS NULL THEN
        RETURN NULL;
    END IF;
    IF traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
       OR left(traceparent, 2) = 'ff'
       OR (left(traceparent, 2) = '00' AND length(traceparent) <> 55)
       OR substr(traceparent, 4, 32) = repeat('0', 32)
       OR substr(traceparent, 37, 16) = repeat('0', 16) THEN
        PERFORM cairn.invalid(format(
            'invalid traceparent "%s": expected a W3C traceparent: 00-<32 lower-case hex '
            'digits of the trace id>-<16 of the parent span id>-<2 of the flags>, neither id '
            'all zeros', left(traceparent, 64)));
    END IF;
    RETURN '00' || substr(traceparent, 3, 53);
END
$$;

-- cairn.enqueue takes the traceparent as its last argument; the old
-- signatures are dropped and made again with it, so calls by position or
-- by name keep working.
DROP FUNCTION cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer,
                            boolean);
DROP FUNCTION cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer,
                            boolean);

-- Enqueues a run of workflow (cairn_enqueue), as in 0020, with traceparent.
CREATE FUNCTION cairn.enqueue(workflow text, input jsonb DEFAULT 'null', key text DEFAULT NULL,
    delay interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL, shard_group text DEFAULT NULL,
    concurrency_key text DEFAULT NULL, priority integer DEFAULT 0,
    require_served boolean DEFAULT false, traceparent text DEFAULT NULL,
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
    v_tp text;
BEGIN
    PERFORM cairn.check_name('workflow', workflow);
    PERFORM cairn.check_key(v_key);
    IF shard_group IS NOT NULL THEN
        PERFORM cairn.check_name('group', shard_group);
    END IF;
    PERFORM cairn.check_json('input', v_input);
    v_tp := cairn.check_traceparent(traceparent);
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
                                 scheduled_at, start_at, concurrency_key, priority, held,
                                 traceparent)
    VALUES (workflow, v_key, v_group, v_shard, v_input, coalesce(max_attempts, 3),
            v_at, CASE WHEN v_held THEN NULL ELSE v_at END, concurrency_key, priority, v_held,
            v_tp)
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
    require_served boolean DEFAULT false, traceparent text DEFAULT NULL,
    OUT id bigint, OUT existed boolean, OUT warning text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM cairn.enqueue(workflow, cairn.json_arg('input', input), key, delay, run_at,
                                max_attempts, shard_group, concurrency_key, priority,
                                require_served, traceparent)
$$;

REVOKE EXECUTE ON FUNCTION
    cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer, boolean,
                  text),
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer, boolean,
                  text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer, boolean,
                  text),
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer, boolean,
                  text)
    TO cairn_client;
