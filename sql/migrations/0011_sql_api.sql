-- 0011: the SQL API. Any PostgreSQL client enqueues, signals, cancels and
-- retries runs and reads them with these functions, inside its own
-- transaction: what they write, and the wake-up they send, take effect only
-- if that transaction commits.
--
-- They keep the C client's rules (engine/client.c): the same shard function,
-- the same validation (messages name the argument, the value and what is
-- accepted), the same idempotency by (workflow, key), and a wake-up of the
-- shard's owner alone, only while it may be idle (runners.idle, 0007). The
-- C client wakes in a transaction of its own after its write; here the
-- pg_notify is part of the caller's transaction, which is what makes a
-- rolled-back enqueue wake nobody. Inputs and payloads are stored as given
-- (SQL cannot seal them; a worker reads plaintext values under any keys).
--
-- The functions are SECURITY DEFINER with a fixed search_path, and the role
-- cairn_client may call them and read cairn.run_view, nothing else.

-- shard = FNV-1a-64(the key's UTF-8 bytes) mod shards, as hash_shard in
-- engine/hash.c. bigint cannot hold an unsigned 64-bit value, so the hash is
-- kept as two 32-bit halves: with the prime 2^40 + 435, h * prime mod 2^64 is
-- h * 435 + (h << 40), and h << 40 only adds lo << 8 to the high half.
CREATE FUNCTION cairn.shard_of(key text, shards integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b bytea := convert_to(key, 'UTF8');
    lo bigint := 2216829733;  -- 0x84222325, the offset basis's low half
    hi bigint := 3421674724;  -- 0xcbf29ce4
    x bigint;
BEGIN
    IF shards <= 0 THEN
        RETURN 0;
    END IF;
    FOR i IN 0 .. length(b) - 1 LOOP
        x := lo # get_byte(b, i);
        hi := (hi * 435 + ((x << 8) & 4294967295) + ((x * 435) >> 32)) & 4294967295;
        lo := (x * 435) & 4294967295;
    END LOOP;
    -- (hi * 2^32 + lo) mod shards, every product below 2^62.
    RETURN (((hi % shards) * (4294967296 % shards)) % shards + lo % shards) % shards;
END
$$;

-- The number of shards recorded by `cairn migrate`, as the client reads it.
CREATE FUNCTION cairn.shards_per_group() RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer := (SELECT value::integer FROM cairn.settings WHERE name = 'shards_per_group');
BEGIN
    IF n IS NULL OR n <= 0 THEN
        RAISE EXCEPTION 'shards_per_group is not recorded in the database: run `cairn migrate`'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN n;
END
$$;

-- The shard of a key in this database.
CREATE FUNCTION cairn.shard_of(key text) RETURNS integer
LANGUAGE sql STABLE STRICT AS $$ SELECT cairn.shard_of(key, cairn.shards_per_group()) $$;

-- A value as an error message shows it: control characters as \xNN, at
-- most 64 characters (as quote() in engine/parse.c).
CREATE FUNCTION cairn.quoted(v text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT (SELECT string_agg(CASE WHEN c < ' ' OR c = chr(127)
                                   THEN '\x' || lpad(to_hex(ascii(c)), 2, '0') ELSE c END, ''
                              ORDER BY n)
            FROM unnest(string_to_array(left(v, 64), NULL)) WITH ORDINALITY AS t(c, n))
        || CASE WHEN length(v) > 64 THEN '...' ELSE '' END
$$;

CREATE FUNCTION cairn.invalid(message text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION '%', message USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- A workflow, group or signal name (parse_check_name): 1 to 128 bytes of
-- letters, digits and _ - . :
CREATE FUNCTION cairn.check_name(what text, v text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    bad integer;
BEGIN
    IF v IS NULL OR v = '' THEN
        PERFORM cairn.invalid(what || ' must not be empty');
    END IF;
    IF octet_length(v) > 128 THEN
        PERFORM cairn.invalid(format('%s is %s bytes long: at most 128 are accepted', what,
                                     octet_length(v)));
    END IF;
    bad := regexp_instr(v, '[^A-Za-z0-9_.:-]');
    IF bad > 0 THEN
        PERFORM cairn.invalid(format(
            'invalid %s "%s": character %s (0x%s) is not accepted; expected letters, digits and _ - . :',
            what, cairn.quoted(v), bad, lpad(to_hex(ascii(substr(v, bad, 1))), 2, '0')));
    END IF;
END
$$;

-- A run's key (parse_check_key): 1 to 512 bytes of printable UTF-8.
CREATE FUNCTION cairn.check_key(v text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    bad integer;
BEGIN
    IF v = '' THEN
        PERFORM cairn.invalid('key must not be empty: keys are 1 to 512 bytes of printable UTF-8');
    END IF;
    IF octet_length(v) > 512 THEN
        PERFORM cairn.invalid(format(
            'invalid key "%s": it is %s bytes long; at most 512 are accepted',
            cairn.quoted(v), octet_length(v)));
    END IF;
    bad := regexp_instr(v, '[\x01-\x1f\x7f]');
    IF bad > 0 THEN
        PERFORM cairn.invalid(format(
            'invalid key "%s": character %s is a control character (0x%s); keys are 1 to 512 bytes of printable UTF-8',
            cairn.quoted(v), bad, lpad(to_hex(ascii(substr(v, bad, 1))), 2, '0')));
    END IF;
END
$$;

-- A JSON value from outside (parse_check_json and check_unsealed): at most
-- 1 MiB as text (the client's default cap), at most 64 levels deep, and not
-- a string that reads as an encrypted value. The depth is walked only when
-- the text has more than 64 brackets, so a common value costs a scan.
CREATE FUNCTION cairn.check_json(what text, v jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t text := v::text;
    depth integer;
BEGIN
    IF octet_length(t) > 1048576 THEN
        PERFORM cairn.invalid(format('%s is %s bytes: larger than the maximum of 1048576 bytes',
                                     what, octet_length(t)));
    END IF;
    IF length(t) - length(translate(t, '[{', '')) > 64 THEN
        WITH RECURSIVE walk(j, d) AS (
            SELECT v, 1
            UNION ALL
            SELECT e.j, walk.d + 1 FROM walk,
                LATERAL (SELECT value FROM jsonb_array_elements(
                             CASE WHEN jsonb_typeof(walk.j) = 'array' THEN walk.j END)
                         UNION ALL
                         SELECT value FROM jsonb_each(
                             CASE WHEN jsonb_typeof(walk.j) = 'object' THEN walk.j END)) e(j)
            WHERE walk.d <= 65)
        SELECT max(d) INTO depth FROM walk WHERE jsonb_typeof(j) IN ('array', 'object');
        IF depth > 64 THEN
            PERFORM cairn.invalid(format('%s is nested more than 64 levels deep: at most 64 are accepted', what));
        END IF;
    END IF;
    IF jsonb_typeof(v) = 'string' AND v #>> '{}' LIKE 'cairn:enc:%' THEN
        PERFORM cairn.invalid(format(
            'invalid %s: a string that starts with "cairn:enc:" is reserved for encrypted values',
            what));
    END IF;
END
$$;

-- Wakes the owner of a shard (only while it may be idle, or any owner for a
-- cancel) on cairn_wake, inside the caller's transaction, so the
-- notification is delivered only if it commits. The payload is as the C
-- client's: OWNER[/cancel] RUN. Within one transaction only the first
-- wake-up of an owner names its run; the others are the bare OWNER, which
-- PostgreSQL folds into one notification, so a transaction that enqueues
-- 10,000 runs sends a notification or two per owner, not 10,000 (the owner
-- then claims all that is due). Which owners were named is remembered in a
-- session setting tagged with the transaction's id, so it means nothing in
-- the next transaction.
CREATE FUNCTION cairn.wake(p_group text, p_shard integer, p_run bigint, p_cancel boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner bigint;
    v_kind text := CASE WHEN p_cancel THEN '/cancel' ELSE '' END;
    v_tag text := pg_current_xact_id()::text || ':';
    v_seen text := coalesce(current_setting('cairn.woken', true), '');
BEGIN
    SELECT l.owner INTO v_owner FROM cairn.shard_leases l
      JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR p_cancel)
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

-- Enqueues a run of workflow (cairn_enqueue): the same (workflow, key)
-- twice returns the first run with existed = true. key NULL: a fresh random
-- one. delay or run_at (not both): when it starts; max_attempts NULL: 3.
CREATE FUNCTION cairn.enqueue(workflow text, input jsonb DEFAULT 'null', key text DEFAULT NULL,
    delay interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL, shard_group text DEFAULT 'default',
    concurrency_key text DEFAULT NULL, priority integer DEFAULT 0,
    OUT id bigint, OUT existed boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    v_key text := coalesce(key, replace(gen_random_uuid()::text, '-', ''));
    v_input jsonb := coalesce(input, 'null');
    v_at timestamptz;
    v_shard integer;
    v_held boolean;
BEGIN
    PERFORM cairn.check_name('workflow', workflow);
    PERFORM cairn.check_key(v_key);
    PERFORM cairn.check_name('group', shard_group);
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
    INSERT INTO cairn.runs AS r (workflow, key, shard_group, shard, input, max_attempts,
                                 scheduled_at, start_at, concurrency_key, priority, held)
    VALUES (workflow, v_key, shard_group, v_shard, v_input, coalesce(max_attempts, 3),
            v_at, CASE WHEN v_held THEN NULL ELSE v_at END, concurrency_key, priority, v_held)
    ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING
    RETURNING r.id INTO id;
    IF id IS NOT NULL THEN
        existed := false;
        IF NOT v_held THEN
            PERFORM cairn.wake(shard_group, v_shard, id, false);
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

-- Locks a run for a state change, or raises: not found.
CREATE FUNCTION cairn.run_for_update(p_run bigint) RETURNS cairn.runs
LANGUAGE plpgsql AS $$
DECLARE
    r cairn.runs;
BEGIN
    SELECT * INTO r FROM cairn.runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', coalesce(p_run::text, 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN r;
END
$$;

CREATE FUNCTION cairn.wrong_state(verb text, p_run bigint, why text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'cannot % run %: %', verb, p_run, why
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

-- Sends the signal name with payload to a run (cairn_signal). A run holds
-- at most max_pending_signals (cairn.settings) unconsumed signals.
CREATE FUNCTION cairn.signal(run bigint, name text, payload jsonb DEFAULT 'null')
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
    r := cairn.run_for_update(run);
    IF r.finished_at IS NOT NULL THEN
        PERFORM cairn.wrong_state('signal', run, 'it has already finished');
    END IF;
    SELECT count(*) INTO v_pending FROM cairn.signals g
     WHERE g.run_id = run AND g.consumed_by_seq IS NULL;
    IF v_pending >= v_cap THEN
        PERFORM cairn.wrong_state('signal', run, format(
            'it holds %s unconsumed signals; the limit (max_pending_signals in cairn.settings) is %s',
            v_pending, v_cap));
    END IF;
    INSERT INTO cairn.signals (run_id, name, payload) VALUES (run, name, v_payload);
    INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
    VALUES (run, r.shard_group, r.shard, 'signal');
    PERFORM cairn.wake(r.shard_group, r.shard, run, false);
END
$$;

-- Cancels a run (cairn_cancel): one that has not started ends cancelled at
-- once; a started one gets the request and a cancel message, and ends
-- cancelled at its next durable call.
CREATE FUNCTION cairn.cancel(run bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    r cairn.runs := cairn.run_for_update(run);
BEGIN
    IF r.finished_at IS NOT NULL THEN
        PERFORM cairn.wrong_state('cancel', run, 'it has already finished');
    END IF;
    IF r.status = 'pending' AND r.attempt = 0 THEN
        UPDATE cairn.runs SET status = 'cancelled', error = 'cancelled', cancel_requested = true,
               finished_at = now(), updated_at = now(), start_at = NULL,
               held = false
         WHERE id = run;
        DELETE FROM cairn.messages WHERE run_id = run;
        PERFORM pg_notify('cairn_done', run::text);
    ELSE
        UPDATE cairn.runs SET cancel_requested = true, updated_at = now() WHERE id = run;
        INSERT INTO cairn.messages (run_id, shard_group, shard, kind)
        VALUES (run, r.shard_group, r.shard, 'cancel');
    END IF;
    PERFORM cairn.wake(r.shard_group, r.shard, run, true);
END
$$;

-- Runs a failed or cancelled run again (cairn_retry): the journal is cut
-- from its first step that is missing or not settled, and the signals
-- consumed from there on are given back.
CREATE FUNCTION cairn.retry(run bigint) RETURNS void
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
           scheduled_at = now(), start_at = now(), claims = 0
     WHERE id = run;
    DELETE FROM cairn.steps WHERE run_id = run AND seq >= v_cut;
    UPDATE cairn.signals SET consumed_by_seq = NULL
     WHERE run_id = run AND consumed_by_seq >= v_cut;
    PERFORM cairn.wake(r.shard_group, r.shard, run, false);
END
$$;

-- Runs for reading, ad hoc: cairn_client may SELECT this view and not the
-- table. Outputs and errors written under encryption keys show as stored.
CREATE VIEW cairn.run_view AS
    SELECT id, workflow, key, shard_group, shard, status, input, output, error, attempt,
           max_attempts, cancel_requested, parent_id, created_at, scheduled_at, started_at,
           updated_at, finished_at
      FROM cairn.runs;

-- One run, or raises: not found.
CREATE FUNCTION cairn.run(run bigint) RETURNS cairn.run_view
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    v cairn.run_view;
BEGIN
    SELECT * INTO v FROM cairn.run_view WHERE id = run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % not found', coalesce(run::text, 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v;
END
$$;

-- PUBLIC may call none of these (functions are PUBLIC's by default); the
-- API is granted to cairn_client below. The functions of other migrations
-- run with their caller's rights, so a role without table privileges (as
-- cairn_client) can do nothing through them.
REVOKE EXECUTE ON FUNCTION cairn.shard_of(text, integer), cairn.shards_per_group(),
    cairn.shard_of(text), cairn.quoted(text), cairn.invalid(text), cairn.check_name(text, text),
    cairn.check_key(text), cairn.check_json(text, jsonb),
    cairn.wake(text, integer, bigint, boolean),
    cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer),
    cairn.run_for_update(bigint), cairn.wrong_state(text, bigint, text),
    cairn.signal(bigint, text, jsonb), cairn.cancel(bigint), cairn.retry(bigint),
    cairn.run(bigint) FROM PUBLIC;

-- The role is shared by every database of the server: created once
-- (concurrent migrations of two databases may race to create it), and, when
-- the migrating user may not create roles, left to an administrator
-- (`CREATE ROLE cairn_client NOLOGIN`) before migrating.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cairn_client') THEN
        BEGIN
            CREATE ROLE cairn_client NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA cairn TO cairn_client;
GRANT EXECUTE ON FUNCTION cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, text, text, integer),
    cairn.signal(bigint, text, jsonb), cairn.cancel(bigint), cairn.retry(bigint),
    cairn.run(bigint), cairn.shard_of(text), cairn.shard_of(text, integer),
    cairn.shards_per_group() TO cairn_client;
GRANT SELECT ON cairn.run_view TO cairn_client;
