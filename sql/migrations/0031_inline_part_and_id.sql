-- 0031: cairn.part_of and cairn.new_run_id as expressions the planner
-- inlines.
--
-- Both were SQL functions with SET search_path, and PostgreSQL inlines no
-- function that sets a parameter: each statement that called one set up
-- the function's own executor on its first row and read cairn.parts
-- twice. Timed with pg_stat_statements on an idle worker taking one run
-- per 10 ms, the owner's read in cairn.push_owner took 0.25 ms of the
-- enqueue's 0.71 ms, 0.13 ms of it in part_of (0.03 ms with the function
-- inlined), and a claim of new leases (engine/lease.c), the children a
-- commit starts (engine/commit.c), the schedules' runs (engine/maint.c)
-- and the SQL API's enqueue call them on every row or statement.
--
-- Now part_of is the parts' keys written into its body, an array indexed
-- by the shard, which cairn.define_part_of writes again whenever the parts
-- change (`cairn migrate --citus` makes one part per Citus shard), and
-- new_run_id an expression. Neither reads a table nor sets search_path:
-- every name in them is qualified with its schema (the operators too), so
-- the caller's search_path cannot change what they mean. part_of stays
-- STABLE: its body is a constant but the parts may change with a
-- migration, and PostgreSQL's plan cache drops the plans that inlined a
-- function when the function is replaced.
CREATE FUNCTION cairn.define_part_of() RETURNS void
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
END
$def$;
REVOKE ALL ON FUNCTION cairn.define_part_of() FROM PUBLIC;
SELECT cairn.define_part_of();

CREATE OR REPLACE FUNCTION cairn.new_run_id(p_shard integer) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT pg_catalog.nextval('cairn.runs_id_seq'::pg_catalog.regclass)
           OPERATOR(pg_catalog.*) 65536 OPERATOR(pg_catalog.+) p_shard
$$;
