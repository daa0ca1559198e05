-- 0025: parts, the model of docs/architecture.md "On Citus", for both
-- deployments.
--
-- Citus distributes a table by one column. So every hot table gets part,
-- the distribution column on Citus: the key of the part that holds the
-- row's run (cairn.parts: part_no = shard mod the number of parts). On one
-- server there is one part, key 0: every row is in it, and a statement
-- that writes no part writes 0.
--
-- Citus also wants every unique key and foreign key of a distributed table
-- to include the column. One server keeps its keys as they are: a key that
-- a join names whole lets PostgreSQL's planner prove the join unique (a
-- join of runs by id alone, with runs_pkey on (id, part), lost that proof
-- and changed plans: the drains of `make bench` were slower). `cairn
-- migrate --citus` remakes the keys with part, under the same names, as it
-- distributes the tables, and the statements name the keys they upsert by
-- name (ON CONFLICT ON CONSTRAINT), which holds on both.

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

-- The SQL API's enqueue (migration 0023) names the new run's id and part:
-- its definition as the server holds it, with its INSERT's column list and
-- VALUES extended (its rights, settings and grants stay as they are).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.enqueue(text, jsonb, text, interval, timestamptz, integer, '
                         'text, text, integer, boolean, text)';
    v_def text := pg_get_functiondef(v_fn);
    v_cols text := 'INSERT INTO cairn.runs AS r (workflow, key,';
    v_vals text := 'VALUES (workflow, v_key,';
BEGIN
    IF strpos(v_def, v_cols) = 0 OR strpos(v_def, v_vals) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue does not insert its runs as migration 0023 did';
    END IF;
    v_def := replace(v_def, v_cols, 'INSERT INTO cairn.runs AS r (id, part, workflow, key,');
    v_def := replace(v_def, v_vals,
                     'VALUES (cairn.new_run_id(v_shard), cairn.part_of(v_shard), workflow, v_key,');
    EXECUTE v_def;
END
$$;

-- cairn.children_sync (migration 0021) names the keys of child_waits and
-- child_awaited in its ON CONFLICT clauses by their columns: by their
-- names instead, which hold once `cairn migrate --citus` has added part.
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
    v_def := replace(v_def, v_waits, 'ON CONFLICT ON CONSTRAINT child_waits_pkey DO NOTHING');
    v_def := replace(v_def, v_awaited,
                     'ON CONFLICT ON CONSTRAINT child_awaited_pkey DO UPDATE');
    EXECUTE v_def;
END
$$;

-- cairn.children_ended and cairn.cancel (migration 0024) and cairn.signal
-- (0022) write a signal and a message in the part of the run they are for
-- (on one server 0, the column's default; on Citus the part's key, which
-- the foreign keys on (run_id, part) check).
DO $$
DECLARE
    v_fn regprocedure := 'cairn.children_ended(bigint[], bigint[], bigint[], text[], text[])';
    v_def text := pg_get_functiondef(v_fn);
    v_sig text := E'INSERT INTO cairn.signals (run_id, name, payload)\n    SELECT p.id, ';
    v_msg text := E'INSERT INTO cairn.messages (run_id, shard_group, shard, kind)\n'
                  '        SELECT p.id, ';
BEGIN
    IF strpos(v_def, v_sig) = 0 OR strpos(v_def, v_msg) = 0 THEN
        RAISE EXCEPTION 'cairn.children_ended does not write as migration 0024 did';
    END IF;
    v_def := replace(v_def, v_sig,
                     E'INSERT INTO cairn.signals (part, run_id, name, payload)\n    SELECT p.part, p.id, ');
    v_def := replace(v_def, v_msg,
                     E'INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)\n'
                     '        SELECT p.part, p.id, ');
    EXECUTE v_def;
    v_fn := 'cairn.cancel(bigint)';
    v_def := pg_get_functiondef(v_fn);
    v_msg := E'INSERT INTO cairn.messages (run_id, shard_group, shard, kind)\n'
             '        VALUES (r.id, ';
    IF strpos(v_def, v_msg) = 0 THEN
        RAISE EXCEPTION 'cairn.cancel does not write as migration 0024 did';
    END IF;
    v_def := replace(v_def, v_msg, E'INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)\n'
                                   '        VALUES (r.part, r.id, ');
    EXECUTE v_def;
    v_fn := 'cairn.signal(bigint, text, jsonb)';
    v_def := pg_get_functiondef(v_fn);
    v_sig := 'INSERT INTO cairn.signals (run_id, name, payload) VALUES (r.id, ';
    v_msg := E'INSERT INTO cairn.messages (run_id, shard_group, shard, kind)\n    VALUES (r.id, ';
    IF strpos(v_def, v_sig) = 0 OR strpos(v_def, v_msg) = 0 THEN
        RAISE EXCEPTION 'cairn.signal does not write as migration 0022 did';
    END IF;
    v_def := replace(v_def, v_sig,
                     'INSERT INTO cairn.signals (part, run_id, name, payload) VALUES (r.part, r.id, ');
    v_def := replace(v_def, v_msg, E'INSERT INTO cairn.messages (part, run_id, shard_group, shard, kind)\n'
                                   '    VALUES (r.part, r.id, ');
    EXECUTE v_def;
END
$$;

-- cairn.wake (migration 0015) reads the lease of the shard in the shard's
-- part: on Citus one task, on the node of the part. Its notification is
-- sent where the function runs, which on Citus is the coordinator, where
-- the relay listens: a pg_notify in a statement that touches a distributed
-- table would be sent on the node that holds its rows.
CREATE OR REPLACE FUNCTION cairn.wake(p_group text, p_shard integer, p_run bigint, p_cancel boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_owner bigint;
    v_kind text := CASE WHEN p_cancel THEN '/cancel' ELSE '' END;
    v_tag text := pg_current_xact_id()::text || ':';
    v_seen text := coalesce(current_setting('cairn.woken', true), '');
    v_any boolean := p_cancel OR current_setting('transaction_isolation') <> 'read committed';
    v_part integer := cairn.part_of(p_shard);
BEGIN
    PERFORM pg_advisory_xact_lock_shared(cairn.wake_lock(p_group, p_shard));
    SELECT l.owner INTO v_owner FROM cairn.shard_leases l
      JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR v_any)
     WHERE l.part = v_part AND l.shard_group = p_group AND l.shard = p_shard;
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

-- The owners of runs p_runs, all in part p_part, woken (cairn.wake) after
-- the write that gave them work committed: the client's wake-up after a
-- signal or a cancel. Each run's shard is read in its part (one task on
-- Citus), and the notifications go out from here, as cairn.wake's do.
-- Returns how many runs it looked at.
CREATE FUNCTION cairn.wake_runs(p_runs bigint[], p_part integer, p_cancel boolean)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v record;
    v_n integer := 0;
BEGIN
    FOR v IN SELECT r.id, r.shard_group, r.shard FROM cairn.runs r
              WHERE r.part = p_part AND r.id = ANY (p_runs) LOOP
        PERFORM cairn.wake(v.shard_group, v.shard, v.id, p_cancel);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
GRANT EXECUTE ON FUNCTION cairn.wake_runs(bigint[], integer, boolean) TO PUBLIC;
