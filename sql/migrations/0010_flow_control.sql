-- 0010: flow control. Concurrency keys, per-key and per-workflow limits,
-- rates and priorities.
--
-- A run with a concurrency key lives in the shard of its key (the client
-- hashes the key instead of the run's key), so one worker owns every run of
-- a key at a time, and that worker enforces the key's limits alone, without
-- a shared counter.
ALTER TABLE cairn.runs ADD COLUMN concurrency_key text CHECK (concurrency_key <> ''),
    ADD COLUMN priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    -- Waiting for a slot of its key: not due (start_at NULL) until a run
    -- of the key frees one (cairn.flow_release).
    ADD COLUMN held boolean NOT NULL DEFAULT false;
ALTER TABLE cairn.runs ADD CONSTRAINT runs_held_pending CHECK (NOT held OR status = 'pending');

-- The held runs of a key, in the order they are let go.
CREATE INDEX runs_held ON cairn.runs (workflow, concurrency_key, priority DESC, id) WHERE held;
-- The unfinished runs of a key that may execute (cairn.flow_active).
CREATE INDEX runs_key_active ON cairn.runs (workflow, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND finished_at IS NULL AND NOT held;
-- Starts with a priority other than 0, in the order the claim takes them
-- (the rest are found through runs_start).
CREATE INDEX runs_start_priority ON cairn.runs (priority DESC, start_at, id)
    WHERE start_at IS NOT NULL AND priority <> 0;

-- The limits of a workflow (`cairn limit set`); a NULL column is no limit.
-- Read by every claim, so a change holds from the next claim on.
CREATE TABLE cairn.limits (
    workflow text PRIMARY KEY CHECK (workflow <> ''),
    key_concurrency integer CHECK (key_concurrency BETWEEN 1 AND 100000),
    concurrency integer CHECK (concurrency BETWEEN 1 AND 100000),
    rate integer CHECK (rate BETWEEN 1 AND 1000000),
    rate_period_ms bigint CHECK (rate_period_ms BETWEEN 1 AND 86400000),
    key_rate integer CHECK (key_rate BETWEEN 1 AND 1000000),
    key_rate_period_ms bigint CHECK (key_rate_period_ms BETWEEN 1 AND 86400000),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- A claim found no free slot of `concurrency`: whoever frees one wakes
    -- every runner (their due runs of the workflow may be anywhere).
    waiting boolean NOT NULL DEFAULT false,
    CHECK ((rate IS NULL) = (rate_period_ms IS NULL)),
    CHECK ((key_rate IS NULL) = (key_rate_period_ms IS NULL))
);

-- Rate limits, strict: N starts per PERIOD are paced one every PERIOD/N
-- (a cell rate algorithm without a burst), so no window of PERIOD ever
-- holds more than N starts. tat is when the next start may happen; key ''
-- is the workflow's own rate. Written by the claim that starts runs.
CREATE TABLE cairn.rates (
    workflow text NOT NULL,
    key text NOT NULL,
    tat timestamptz NOT NULL,
    PRIMARY KEY (workflow, key)
);

-- The advisory lock that serializes the writers of a key's held runs (one
-- bigint: the lock space of singleton fences, apart from shard locks).
CREATE FUNCTION cairn.flow_lock(p_workflow text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('cairn.key:' || p_workflow || ':' || p_key, 0)
$$;

-- The runs of a key that execute or are about to: running, or pending,
-- due and not held. Suspended runs (sleeping, waiting) hold no slot.
CREATE FUNCTION cairn.flow_active(p_workflow text, p_key text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM cairn.runs
    WHERE workflow = p_workflow AND concurrency_key = p_key AND finished_at IS NULL
      AND NOT held AND (status = 'running' OR (status = 'pending' AND start_at <= now()))
$$;

-- How many runs of one key may be due or executing at once: its key limit,
-- or, without one, a fair share of 64, so that a key with a backlog has at
-- most that many due and another key's first run does not wait behind it.
CREATE FUNCTION cairn.flow_cap(p_workflow text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT key_concurrency FROM cairn.limits WHERE workflow = p_workflow), 64)
$$;

-- Lets go as many held runs of a key as it has free slots
-- (cairn.flow_cap); returns their ids. Under the key's
-- lock, each statement with a fresh snapshot: a concurrent enqueue that
-- holds a run and a run of the key that ends are serialized, so no run
-- stays held while its key has a free slot. Called after every write that
-- frees a slot or holds a run: an enqueue that held, a run of the key that
-- ended or suspended (by its worker), a cancel, a limit raised.
CREATE FUNCTION cairn.flow_release(p_workflow text, p_key text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_limit integer;
    v_free integer;
    v_ids bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(cairn.flow_lock(p_workflow, p_key));
    v_limit := cairn.flow_cap(p_workflow);
    v_free := greatest(v_limit - cairn.flow_active(p_workflow, p_key), 0);
    IF v_free = 0 THEN
        RETURN '{}';
    END IF;
    WITH go AS (
        SELECT id FROM cairn.runs
        WHERE workflow = p_workflow AND concurrency_key = p_key AND held
        ORDER BY priority DESC, id LIMIT v_free
        FOR UPDATE),
    up AS (
        UPDATE cairn.runs r SET held = false, start_at = r.scheduled_at, updated_at = now()
        FROM go WHERE r.id = go.id
        RETURNING r.id)
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids FROM up;
    RETURN v_ids;
END;
$$;

-- Every held run of a workflow whose key has free slots (a limit raised or
-- removed): flow_release for each key that holds runs.
CREATE FUNCTION cairn.flow_release_all(p_workflow text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
    v_ids bigint[] := '{}';
BEGIN
    FOR v_key IN SELECT DISTINCT concurrency_key FROM cairn.runs
                 WHERE workflow = p_workflow AND held LOOP
        v_ids := v_ids || cairn.flow_release(p_workflow, v_key);
    END LOOP;
    RETURN v_ids;
END;
$$;

-- Takes up to p_want starts (at most one: they are paced) from the rate
-- p_rate per p_period_ms of (workflow, key): how many it allowed, when the
-- next start may happen, and the interval between starts. The row is locked
-- until the claim commits, so two workers never take the same start.
CREATE FUNCTION cairn.flow_take(p_workflow text, p_key text, p_rate integer, p_period_ms bigint,
    p_want integer, OUT allowed integer, OUT next_at timestamptz, OUT step interval)
LANGUAGE plpgsql AS $$
BEGIN
    step := p_period_ms * interval '1 millisecond' / p_rate;
    INSERT INTO cairn.rates (workflow, key, tat) VALUES (p_workflow, p_key, now())
    ON CONFLICT DO NOTHING;
    SELECT tat INTO next_at FROM cairn.rates
    WHERE workflow = p_workflow AND key = p_key FOR UPDATE;
    allowed := CASE WHEN next_at <= now() AND p_want > 0 THEN 1 ELSE 0 END;
    IF allowed > 0 THEN
        next_at := now() + step;
        UPDATE cairn.rates SET tat = next_at WHERE workflow = p_workflow AND key = p_key;
    END IF;
END;
$$;

-- The slots of the workflows' fleet-wide `concurrency` limits: one row per
-- run executing under one, with the runner executing it. Taken by the claim
-- (cairn.flow_slots counts them), given back by that runner when the run
-- ends or suspends; a slot counts only while its runner's lease connection
-- lives, so the slots of a worker that died free themselves.
CREATE TABLE cairn.slots (
    run_id bigint PRIMARY KEY,
    workflow text NOT NULL,
    runner_id bigint NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX slots_workflow ON cairn.slots (workflow);

-- How many of p_want runs of a workflow may execute now under its
-- `concurrency` limit p_limit. Locks the limit's row until the claim
-- commits (with the slots it took), so the claims of all workers take the
-- workflow's slots one after another, each counting the others' (fresh
-- snapshot, after the lock). A claim left short marks the limit waiting.
CREATE FUNCTION cairn.flow_slots(p_workflow text, p_limit integer, p_want integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_used integer;
BEGIN
    PERFORM 1 FROM cairn.limits WHERE workflow = p_workflow FOR UPDATE;
    SELECT count(*) INTO v_used FROM cairn.slots s JOIN cairn.runners r ON r.id = s.runner_id
    WHERE s.workflow = p_workflow
      AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.lease_pid);
    IF v_used + p_want > p_limit THEN
        UPDATE cairn.limits SET waiting = true WHERE workflow = p_workflow AND NOT waiting;
    END IF;
    RETURN least(p_want, greatest(p_limit - v_used, 0));
END;
$$;

