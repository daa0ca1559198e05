-- 0027: a cancelled parent ends its children that never started, and the
-- end a cancelled child sends its parent can be sealed.
--
-- cairn.children_ended (migration 0024) built the end signal of a child
-- cancelled before it started in SQL, as plaintext jsonb: with payloads
-- encrypted at rest (CAIRN_ENCRYPTION_KEYS) every other signal payload is
-- sealed by the client or worker that writes it, and the database has no
-- key. Its writes stay in the part of the run they are for (migration
-- 0025). It now takes the payload from its caller (e_payload, one a run, as
-- stored: sealed by a client with keys), and builds it as before only
-- where none is given (cairn.cancel, the SQL API, which has no key).
DROP FUNCTION cairn.children_ended(bigint[], bigint[], bigint[], text[], text[]);

CREATE FUNCTION cairn.children_ended(e_run bigint[], e_child bigint[], e_parent bigint[],
                                     e_status text[], e_error text[],
                                     e_payload text[] DEFAULT NULL)
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
    INSERT INTO cairn.signals (part, run_id, name, payload)
    SELECT p.part, p.id, 'cairn.child:' || x.c,
           coalesce(e_payload[x.i]::jsonb,
                    jsonb_build_object('status', x.st, 'output', NULL, 'error', x.er))
    FROM unnest(e_run, e_child, e_parent, e_status, e_error)
         WITH ORDINALITY AS x(r, c, pa, st, er, i)
    JOIN cairn.runs p ON p.id = x.pa
    WHERE p.finished_at IS NULL;
    WITH m AS (
        INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)
        SELECT p.part, p.id, p.shard_group, p.shard, 'signal'
        FROM cairn.children_sync(e_run, '{}', '{}', '{}', '{}', '{}', e_run, e_child, e_parent)
             AS w(id)
        JOIN cairn.runs p ON p.id = w.id AND p.finished_at IS NULL
        RETURNING run_id, shard_group, shard)
    SELECT count(cairn.wake(shard_group, shard, run_id, false)) INTO v_woken FROM m;
    RETURN v_woken;
END
$$;
