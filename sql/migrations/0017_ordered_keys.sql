-- 0017: a run enqueued without a key gets a UUIDv7 (RFC 9562) as its key,
-- 32 hex digits as before: the time in Unix ms, then 74 random bits. The C
-- client makes the same (fresh_key in engine/client.c).
--
-- A random key (gen_random_uuid) put every keyless run on a random page of
-- the unique index on (workflow, key): on a large table, a page to read and,
-- after each checkpoint, a full page to write to the WAL. Keys made later
-- sort later, so these inserts land together at the end of the index.
-- Measured with pgbench, 8 clients inserting single runs into a cairn.runs
-- of 1,000,000 rows, fsync on, a CHECKPOINT before each 15 s round, 3
-- alternated pairs: 6,498 / 6,097 / 5,191 inserts/s against 6,189 / 5,192 /
-- 4,356 with random keys, and 60-75 MB of WAL a round against 110-120 MB.

CREATE FUNCTION cairn.fresh_key() RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
        || '7' || substr(replace(gen_random_uuid()::text, '-', ''), 14)
$$;

-- cairn.enqueue of migration 0011 with that key: its definition as the
-- server holds it, with the one expression that made the key replaced (its
-- rights, settings and grants stay as they are).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, '
                         'text, text, integer)';
    v_def text := pg_get_functiondef(v_fn);
    v_old text := $k$coalesce(key, replace(gen_random_uuid()::text, '-', ''))$k$;
BEGIN
    IF strpos(v_def, v_old) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue does not make its keys as migration 0011 did';
    END IF;
    EXECUTE replace(v_def, v_old, 'coalesce(key, cairn.fresh_key())');
END
$$;
