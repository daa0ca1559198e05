-- 0009: runs that start runs, send to runs, publish events, and know the
-- code that ran them.
--
-- A child run (cairn_child_start) names its parent: when it finishes, the
-- commit that finishes it also sends the parent a signal carrying its
-- outcome, and a cancelled parent asks its unfinished children to cancel.
-- Runs without a parent (nearly all) stay out of the index.
ALTER TABLE cairn.runs ADD COLUMN parent_id bigint;
CREATE INDEX runs_parent ON cairn.runs (parent_id) WHERE parent_id IS NOT NULL;

-- The journal's new durable calls: a child started, a signal sent, a run
-- enqueued, an event published, a patch passed (cairn_patched).
ALTER TABLE cairn.steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE cairn.steps ADD CONSTRAINT steps_kind_check
    CHECK (kind IN ('step', 'sleep', 'signal', 'now', 'random', 'child', 'send', 'enqueue',
                    'event', 'patch'));

-- The code version (CAIRN_CODE_VERSION) of the worker whose commit first
-- wrote the run's status: which deploy started it.
ALTER TABLE cairn.runs ADD COLUMN code_version text;

-- Events (cairn_set_event): a run's durable key/value pairs, the latest
-- value winning, written in the commit that journals them; readers are told
-- on the channel cairn_event (payload: the run id).
CREATE TABLE cairn.events (
    run_id bigint NOT NULL REFERENCES cairn.runs (id) ON DELETE CASCADE,
    key text NOT NULL CHECK (key <> ''),
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- Schedules (`cairn schedule create`): the singleton cairn.scheduler fires
-- each one when next_at has come, as a run keyed by the schedule and the
-- due time (so no fire happens twice), and moves next_at on in the same
-- statement. input is stored as a run's input is (sealed with keys).
CREATE TABLE cairn.schedules (
    name text PRIMARY KEY CHECK (name <> ''),
    cron text NOT NULL,
    tz text NOT NULL DEFAULT 'UTC',
    workflow text NOT NULL CHECK (workflow <> ''),
    shard_group text NOT NULL DEFAULT 'default',
    input jsonb NOT NULL DEFAULT 'null',
    overlap text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow')),
    catchup text NOT NULL DEFAULT 'latest' CHECK (catchup IN ('none', 'latest', 'all')),
    paused boolean NOT NULL DEFAULT false,
    next_at timestamptz NOT NULL,
    last_at timestamptz,
    fires bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON cairn.schedules (next_at) WHERE NOT paused;
