-- 0019: a JSON argument of the SQL API that PostgreSQL's jsonb cannot take
-- is refused naming the argument, as the C client and the HTTP API refuse
-- it (json_check_text in engine/parse.c), instead of with jsonb's own
-- message, which names no argument ("unsupported Unicode escape sequence",
-- for a \u0000).
--
-- cairn.enqueue and cairn.signal take their JSON as jsonb, and a text
-- becomes jsonb before a function is called, so no function can name the
-- argument that failed. So each gets a twin that takes that argument as
-- text (and has no default for it): a quoted literal or an untyped
-- parameter ('{"a": 1}', $2), whose type is unknown, is taken by the text
-- twin (PostgreSQL prefers the string category for an unknown argument),
-- which converts it and calls the jsonb function; a jsonb value
-- (jsonb_build_object(...), a jsonb column) goes to the jsonb function as
-- before; a call without the argument has only the jsonb function to go
-- to. What the twins return, and every other argument, is the jsonb
-- function's.
--
-- Bytes that are not UTF-8 never reach a function: PostgreSQL refuses them
-- as it receives the statement (invalid byte sequence for encoding "UTF8").

-- v as jsonb (NULL: null), or invalid_parameter_value naming what.
CREATE FUNCTION cairn.json_arg(what text, v text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    detail text;
BEGIN
    RETURN coalesce(v, 'null')::jsonb;
EXCEPTION
    WHEN untranslatable_character THEN
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
        PERFORM cairn.invalid(format(
            '%s holds a character jsonb cannot store (%s): cairn accepts no NUL character '
            '(\u0000) in JSON text; send binary data as base64', what, rtrim(detail, '.')));
    WHEN invalid_text_representation THEN
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
        PERFORM cairn.invalid(format('%s is not valid JSON: %s', what,
                                     coalesce(rtrim(detail, '.'), SQLERRM)));
END
$$;

CREATE FUNCTION cairn.enqueue(workflow text, input text, key text DEFAULT NULL,
    delay interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT NULL, shard_group text DEFAULT 'default',
    concurrency_key text DEFAULT NULL, priority integer DEFAULT 0,
    OUT id bigint, OUT existed boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM cairn.enqueue(workflow, cairn.json_arg('input', input), key, delay, run_at,
                                max_attempts, shard_group, concurrency_key, priority)
$$;

CREATE FUNCTION cairn.signal(run bigint, name text, payload text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT cairn.signal(run, name, cairn.json_arg('signal payload', payload))
$$;

REVOKE EXECUTE ON FUNCTION cairn.json_arg(text, text),
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer),
    cairn.signal(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    cairn.enqueue(text, text, text, interval, timestamptz, integer, text, text, integer),
    cairn.signal(bigint, text, text) TO cairn_client;
