-- 0001_init: the cairn schema (DESIGN.md section 3).
-- Applied by `cairn migrate` inside one transaction; schema cairn and
-- cairn.schema_migrations already exist (the migrator creates them).

-- Settings recorded once per database, such as shards_per_group.
CREATE TABLE cairn.settings (
    name  text PRIMARY KEY,
    value text NOT NULL
);

-- One row per live worker process.
CREATE TABLE cairn.runners (
    id              bigserial PRIMARY KEY,
    name            text NOT NULL,
    address         text NOT NULL,
    version         text NOT NULL,
    groups          text[] NOT NULL,
    weight          integer NOT NULL DEFAULT 100 CHECK (weight BETWEEN 1 AND 10000),
    healthy         boolean NOT NULL DEFAULT true,
    health_failures integer NOT NULL DEFAULT 0 CHECK (health_failures >= 0),
    lease_pid       integer NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now()
);

-- Who owns each shard, and the fencing epoch bumped on every acquisition.
CREATE TABLE cairn.shard_leases (
    shard_group text NOT NULL,
    shard       integer NOT NULL CHECK (shard >= 0),
    owner       bigint REFERENCES cairn.runners (id) ON DELETE SET NULL,
    epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    acquired_at timestamptz,
    PRIMARY KEY (shard_group, shard)
);
CREATE INDEX shard_leases_owner ON cairn.shard_leases (owner);

CREATE TABLE cairn.runs (
    id               bigserial PRIMARY KEY,
    workflow         text NOT NULL CHECK (workflow <> ''),
    key              text NOT NULL CHECK (key <> ''),
    shard_group      text NOT NULL CHECK (shard_group <> ''),
    shard            integer NOT NULL CHECK (shard >= 0),
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN
                     ('pending', 'running', 'sleeping', 'waiting',
                      'completed', 'failed', 'cancelled')),
    input            jsonb NOT NULL DEFAULT 'null',
    output           jsonb,
    error            text,
    attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    UNIQUE (workflow, key),
    CHECK ((finished_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled')))
);
CREATE INDEX runs_status ON cairn.runs (status, id);
CREATE INDEX runs_finished ON cairn.runs (finished_at) WHERE finished_at IS NOT NULL;

-- The journal: one row per durable call of a run, in order.
CREATE TABLE cairn.steps (
    run_id      bigint NOT NULL REFERENCES cairn.runs (id) ON DELETE CASCADE,
    seq         integer NOT NULL CHECK (seq >= 0),
    name        text NOT NULL CHECK (name <> ''),
    kind        text NOT NULL CHECK (kind IN ('step', 'sleep', 'signal', 'now', 'random')),
    status      text NOT NULL CHECK (status IN ('completed', 'failed', 'retrying', 'waiting')),
    output      jsonb,
    error       text,
    attempts    integer NOT NULL DEFAULT 1 CHECK (attempts >= 0),
    wake_at     timestamptz,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (run_id, seq)
);

-- Signals sent to a run; buffered until a signal step consumes them.
CREATE TABLE cairn.signals (
    id              bigserial PRIMARY KEY,
    run_id          bigint NOT NULL REFERENCES cairn.runs (id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (name <> ''),
    payload         jsonb NOT NULL DEFAULT 'null',
    created_at      timestamptz NOT NULL DEFAULT now(),
    consumed_by_seq integer
);
CREATE INDEX signals_unconsumed ON cairn.signals (run_id, name, id) WHERE consumed_by_seq IS NULL;

-- "Run R needs attention at time T": deleted in the transaction that
-- records its effect, so the table stays small.
CREATE TABLE cairn.messages (
    id          bigserial PRIMARY KEY,
    run_id      bigint NOT NULL REFERENCES cairn.runs (id) ON DELETE CASCADE,
    shard_group text NOT NULL,
    shard       integer NOT NULL CHECK (shard >= 0),
    kind        text NOT NULL CHECK (kind IN ('start', 'signal', 'wake', 'cancel')),
    deliver_at  timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0)
);
-- The poll query: due messages of the shards a runner owns, oldest first.
CREATE INDEX messages_due ON cairn.messages (shard_group, shard, deliver_at, id);
CREATE INDEX messages_run ON cairn.messages (run_id);
