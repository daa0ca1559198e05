-- 0006: a run's start is a column of the run, not a row of cairn.messages.
--
-- Every run needs exactly one start, so enqueueing wrote a second row (and
-- four index entries and a foreign-key check) for it, and every run's first
-- durable commit deleted that row again. Now runs.start_at is the start: set
-- when the run is enqueued or retried, due once it has passed, claimed by the
-- owner of the run's shard like a message (the claim names it message id 0),
-- and cleared by the first commit after which the run needs no start again
-- (it suspended, finished, or was cancelled before it started). Messages
-- stay for what can come many times: signals, wake-ups, cancels.

ALTER TABLE cairn.runs ADD COLUMN start_at timestamptz;
-- A finished run never starts again (until `cairn retry` makes it pending).
ALTER TABLE cairn.runs ADD CONSTRAINT runs_finished_start
    CHECK (finished_at IS NULL OR start_at IS NULL);

-- The poller walks due starts in time order, as it walks messages_deliver.
CREATE INDEX runs_start ON cairn.runs (start_at, id) WHERE start_at IS NOT NULL;

-- Starts already waiting as messages become columns.
UPDATE cairn.runs r SET start_at = m.at
  FROM (SELECT run_id, min(deliver_at) AS at FROM cairn.messages
        WHERE kind = 'start' GROUP BY run_id) m
 WHERE r.id = m.run_id AND r.finished_at IS NULL;
DELETE FROM cairn.messages WHERE kind = 'start';
ALTER TABLE cairn.messages DROP CONSTRAINT messages_kind_check;
ALTER TABLE cairn.messages ADD CONSTRAINT messages_kind_check
    CHECK (kind IN ('signal', 'wake', 'cancel'));

-- The client enqueues one run with a prepared INSERT of its own now.
DROP FUNCTION cairn.enqueue_one(text, text, text, integer, jsonb, integer, bigint, bigint,
                                boolean);
