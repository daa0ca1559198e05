-- 0038: cairn.run_keys, which keeps a run's (workflow, key) unique on a
-- database with more than one part (Citus).
--
-- A run lives in the shard of its key, unless it has a concurrency key:
-- then in that key's shard, so that one worker owns every run of the key
-- and counts its slots exactly. On Citus each unique key includes the
-- part, so runs' (workflow, key, part) does not refuse the same
-- (workflow, key) stored in two parts: enqueued with two concurrency keys,
-- or with one and without. run_keys holds the key of every run a client
-- or the SQL API enqueues there, in the part of the *key*
-- (cairn.part_of(cairn.shard_of(key))): whatever part its run lives in,
-- one index refuses a second run of the key. An enqueue writes it in the
-- transaction that inserts the run; the janitor deletes it with the run.
--
-- On one server (one part) runs' own unique (workflow, key) spans the
-- whole database, so nothing writes run_keys and the enqueue's statements
-- are those of before. `cairn migrate --citus` fills it from the runs of a
-- database it converts. The keys cairn makes for children
-- (cairn.child:RUN:SEQ), successors (cairn.next:RUN) and a schedule's
-- fires (cairn.schedule:NAME:TIME) are unique by what makes them, and are
-- not written here.
CREATE TABLE cairn.run_keys (
    part     integer NOT NULL,
    workflow text    NOT NULL,
    key      text    NOT NULL,
    run_id   bigint  NOT NULL,
    CONSTRAINT run_keys_pkey PRIMARY KEY (workflow, key, part)
);

-- The number of parts, for statements that act only with more than one:
-- written as a constant by cairn.define_part_of, with cairn.part_of.
CREATE OR REPLACE FUNCTION cairn.define_part_of() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $def$
DECLARE
    v_keys integer[] := ARRAY(SELECT key FROM cairn.parts ORDER BY part_no);
BEGIN
    IF cardinality(v_keys) = 0 THEN
        RAISE EXCEPTION 'cairn.parts is empty: a database has at least one part';
    END IF;
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION cairn.part_of(p_shard integer) RETURNS integer
        LANGUAGE sql STABLE AS $body$
            SELECT (%L::pg_catalog.int4[])[p_shard OPERATOR(pg_catalog.%%) %s
                                           OPERATOR(pg_catalog.+) 1]
        $body$$f$, v_keys, cardinality(v_keys));
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION cairn.part_count() RETURNS integer
        LANGUAGE sql STABLE AS $body$ SELECT %s $body$$f$, cardinality(v_keys));
END
$def$;
REVOKE ALL ON FUNCTION cairn.define_part_of() FROM PUBLIC;
SELECT cairn.define_part_of();

-- The SQL API's enqueue (migrations 0023, 0025) writes the key of a new
-- run on a database with parts. A key that another part's run holds
-- undoes the insert (in the caller's transaction) and reads that run, as
-- a key that exists did before. Its definition as the server holds it,
-- extended (its rights, settings and grants stay as they are).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, '
                         'text, text, integer, boolean, text)';
    v_def text := pg_get_functiondef(v_fn);
    v_decl text := E'    v_tp text;\n';
    v_ins text := E'    RETURNING r.id INTO id;\n';
BEGIN
    IF strpos(v_def, v_decl) = 0 OR strpos(v_def, v_ins) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue does not insert its runs as migration 0025 left it';
    END IF;
    v_def := replace(v_def, v_decl, v_decl || E'    v_keyed bigint;\n');
    v_def := replace(v_def, v_ins, v_ins || $ins$
    IF id IS NOT NULL AND cairn.part_count() > 1 THEN
        INSERT INTO cairn.run_keys AS k (part, workflow, key, run_id)
        VALUES (cairn.part_of(cairn.shard_of(v_key, cairn.shards_per_group())), workflow,
                v_key, id)
        ON CONFLICT ON CONSTRAINT run_keys_pkey DO NOTHING
        RETURNING k.run_id INTO v_keyed;
        IF v_keyed IS NULL THEN -- the key's run lives in another part
            DELETE FROM cairn.runs r WHERE r.part = cairn.part_of(v_shard) AND r.id = id;
            id := NULL;
        END IF;
    END IF;
$ins$);
    EXECUTE v_def;
END
$$;
