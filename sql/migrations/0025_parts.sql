-- 0025: parts, the model of docs/architecture.md "On Citus", for both
-- deployments.
--
-- Citus distributes a table by one column, and a unique key or a foreign
-- key of a distributed table must include it. So every hot table gets
-- part, the distribution column on Citus: the key of the part that holds
-- the row's run (cairn.parts: part_no = shard mod the number of parts).
-- Every unique key and foreign key of those tables includes it, under the
-- name it had, so that ON CONFLICT ON CONSTRAINT keeps naming it. On one
-- server there is one part, key 0: every row is in it, each key is as
-- unique as it was, and a statement that writes no part writes 0.
-- `cairn migrate --citus` makes the parts of a Citus cluster (one per
-- Citus shard) and distributes the tables by part.

-- The parts: part_no 0 to N-1, each with the value stored in part (on
-- Citus chosen so that each part's key hashes into a Citus shard of its
-- own).
CREATE TABLE cairn.parts (
    part_no integer PRIMARY KEY CHECK (part_no >= 0),
    key integer NOT NULL UNIQUE
);
INSERT INTO cairn.parts (part_no, key) VALUES (0, 0);

-- The part (its key) of cairn shard p_shard, for the statements in SQL;
-- the C client computes the same from the parts it reads with the
-- settings (db_read_settings).
CREATE FUNCTION cairn.part_of(p_shard integer) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT key FROM cairn.parts
    WHERE part_no = p_shard % (SELECT count(*) FROM cairn.parts)::integer
$$;

-- Run ids carry their shard: nextval * 65536 + shard (65536 is the most
-- shards a group may have), so that any id names its shard, hence its
-- part, with no read (signal, cancel, status of a run by id route on
-- Citus). Ids still grow with the sequence. Every insert of a run names its
-- id: the column has no default any more, so an insert that forgets fails
-- instead of making an id without its shard. Runs made before this
-- migration keep their ids: those below first_placed_id carry no shard.
CREATE FUNCTION cairn.new_run_id(p_shard integer) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT nextval('cairn.runs_id_seq') * 65536 + p_shard
$$;
ALTER TABLE cairn.runs ALTER COLUMN id DROP DEFAULT;
INSERT INTO cairn.settings (name, value)
SELECT 'first_placed_id', ((s.last_value + CASE WHEN s.is_called THEN 1 ELSE 0 END) * 65536)::text
FROM cairn.runs_id_seq s
ON CONFLICT (name) DO NOTHING;

-- The foreign keys to runs go first: they name its primary key.
ALTER TABLE cairn.steps DROP CONSTRAINT steps_run_id_fkey;
ALTER TABLE cairn.signals DROP CONSTRAINT signals_run_id_fkey;
ALTER TABLE cairn.messages DROP CONSTRAINT messages_run_id_fkey;
ALTER TABLE cairn.signal_links DROP CONSTRAINT signal_links_run_id_fkey;
ALTER TABLE cairn.events DROP CONSTRAINT events_run_id_fkey;
ALTER TABLE cairn.child_waits DROP CONSTRAINT child_waits_run_id_fkey;

-- A column with a constant default is added without rewriting the table.
ALTER TABLE cairn.runs ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.steps ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.signals ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.messages ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.signal_links ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.events ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.child_waits ADD COLUMN part integer NOT NULL DEFAULT 0;
ALTER TABLE cairn.child_awaited ADD COLUMN part integer NOT NULL DEFAULT 0;
-- The fence of a claim and of a commit reads a shard's lease row in the
-- same statement as the shard's runs: colocated with them.
ALTER TABLE cairn.shard_leases ADD COLUMN part integer NOT NULL DEFAULT 0;

-- The keys, each extended by part. (workflow, key) stays unique across
-- parts on one server (one part) and, on Citus, for every run without a
-- concurrency key: such a run lives in the shard of its key, so the same
-- (workflow, key) is always in the same part.
ALTER TABLE cairn.runs DROP CONSTRAINT runs_pkey,
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id, part),
    DROP CONSTRAINT runs_workflow_key_key,
    ADD CONSTRAINT runs_workflow_key_key UNIQUE (workflow, key, part);
ALTER TABLE cairn.steps DROP CONSTRAINT steps_pkey,
    ADD CONSTRAINT steps_pkey PRIMARY KEY (run_id, seq, part);
ALTER TABLE cairn.signals DROP CONSTRAINT signals_pkey,
    ADD CONSTRAINT signals_pkey PRIMARY KEY (id, part);
ALTER TABLE cairn.messages DROP CONSTRAINT messages_pkey,
    ADD CONSTRAINT messages_pkey PRIMARY KEY (id, part);
-- A link names its run: a nonce is unique in its run's part.
ALTER TABLE cairn.signal_links DROP CONSTRAINT signal_links_pkey,
    ADD CONSTRAINT signal_links_pkey PRIMARY KEY (nonce, part);
ALTER TABLE cairn.events DROP CONSTRAINT events_pkey,
    ADD CONSTRAINT events_pkey PRIMARY KEY (run_id, key, part);
ALTER TABLE cairn.child_waits DROP CONSTRAINT child_waits_pkey,
    ADD CONSTRAINT child_waits_pkey PRIMARY KEY (run_id, part);
-- A child is awaited by its one parent, in the parent's part.
ALTER TABLE cairn.child_awaited DROP CONSTRAINT child_awaited_pkey,
    ADD CONSTRAINT child_awaited_pkey PRIMARY KEY (child_id, part);
ALTER TABLE cairn.shard_leases DROP CONSTRAINT shard_leases_pkey,
    ADD CONSTRAINT shard_leases_pkey PRIMARY KEY (shard_group, shard, part);

ALTER TABLE cairn.steps ADD CONSTRAINT steps_run_id_fkey FOREIGN KEY (run_id, part)
    REFERENCES cairn.runs (id, part) ON DELETE CASCADE;
ALTER TABLE cairn.signals ADD CONSTRAINT signals_run_id_fkey FOREIGN KEY (run_id, part)
    REFERENCES cairn.runs (id, part) ON DELETE CASCADE;
ALTER TABLE cairn.messages ADD CONSTRAINT messages_run_id_fkey FOREIGN KEY (run_id, part)
    REFERENCES cairn.runs (id, part) ON DELETE CASCADE;
ALTER TABLE cairn.signal_links ADD CONSTRAINT signal_links_run_id_fkey
    FOREIGN KEY (run_id, part) REFERENCES cairn.runs (id, part) ON DELETE CASCADE;
ALTER TABLE cairn.events ADD CONSTRAINT events_run_id_fkey FOREIGN KEY (run_id, part)
    REFERENCES cairn.runs (id, part) ON DELETE CASCADE;
ALTER TABLE cairn.child_waits ADD CONSTRAINT child_waits_run_id_fkey FOREIGN KEY (run_id, part)
    REFERENCES cairn.runs (id, part) ON DELETE CASCADE;

-- The SQL API's enqueue (migration 0020) names the new run's id and part:
-- its definition as the server holds it, with its INSERT's column list and
-- VALUES extended (its rights, settings and grants stay as they are).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, '
                         'text, text, integer, boolean)';
    v_def text := pg_get_functiondef(v_fn);
    v_cols text := 'INSERT INTO cairn.runs AS r (workflow, key,';
    v_vals text := 'VALUES (workflow, v_key,';
BEGIN
    IF strpos(v_def, v_cols) = 0 OR strpos(v_def, v_vals) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue does not insert its runs as migration 0020 did';
    END IF;
    v_def := replace(v_def, v_cols, 'INSERT INTO cairn.runs AS r (id, part, workflow, key,');
    v_def := replace(v_def, v_vals,
                     'VALUES (cairn.new_run_id(v_shard), cairn.part_of(v_shard), workflow, v_key,');
    EXECUTE v_def;
END
$$;

-- cairn.children_sync (migration 0021) names the keys of child_waits and
-- child_awaited in its ON CONFLICT clauses: the same, with part.
DO $$
DECLARE
    v_fn regprocedure := 'cairn.children_sync(bigint[], bigint[], integer[], integer[], '
                         'bigint[], bigint[], bigint[], bigint[], bigint[])';
    v_def text := pg_get_functiondef(v_fn);
    v_waits text := 'ON CONFLICT (run_id) DO NOTHING';
    v_awaited text := 'ON CONFLICT (child_id) DO UPDATE';
BEGIN
    IF strpos(v_def, v_waits) = 0 OR strpos(v_def, v_awaited) = 0 THEN
        RAISE EXCEPTION 'cairn.children_sync does not write as migration 0021 did';
    END IF;
    v_def := replace(v_def, v_waits, 'ON CONFLICT (run_id, part) DO NOTHING');
    v_def := replace(v_def, v_awaited, 'ON CONFLICT (child_id, part) DO UPDATE');
    EXECUTE v_def;
END
$$;
