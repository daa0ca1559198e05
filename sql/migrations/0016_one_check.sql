-- 0016: one CHECK constraint per hot table instead of one per rule.
--
-- PostgreSQL prepares the CHECK constraints of a table again in every
-- statement that inserts or updates its rows: each is read back from its
-- stored form, planned and compiled, one by one. cairn.runs had 13, and
-- every enqueue, claim and commit of a run paid for all of them. The same
-- rules ANDed in one constraint are prepared once per statement. Measured
-- with pgbench, 8 clients inserting single runs as cairn_enqueue does, on a
-- copy of cairn.runs with fsync on, 4 alternated pairs: 5,013 inserts/s
-- against 4,543 (+10 %, every pair). A row passes the combined constraint
-- exactly when it passed each of the old ones: a CHECK fails only on false,
-- and an AND is false only when one of its terms is.
--
-- The old constraints held for every row, so the new one is added without
-- reading the table (NOT VALID) and then validated, which does not block
-- writers.

ALTER TABLE cairn.runs
    DROP CONSTRAINT runs_workflow_check,
    DROP CONSTRAINT runs_key_check,
    DROP CONSTRAINT runs_shard_group_check,
    DROP CONSTRAINT runs_shard_check,
    DROP CONSTRAINT runs_status_check,
    DROP CONSTRAINT runs_attempt_check,
    DROP CONSTRAINT runs_max_attempts_check,
    DROP CONSTRAINT runs_check,
    DROP CONSTRAINT runs_claims_check,
    DROP CONSTRAINT runs_finished_start,
    DROP CONSTRAINT runs_concurrency_key_check,
    DROP CONSTRAINT runs_priority_check,
    DROP CONSTRAINT runs_held_pending,
    ADD CONSTRAINT runs_valid CHECK (
        workflow <> '' AND key <> '' AND shard_group <> '' AND shard >= 0
        AND status IN ('pending', 'running', 'sleeping', 'waiting', 'completed', 'failed',
                       'cancelled')
        AND attempt >= 0 AND max_attempts >= 1 AND claims >= 0
        -- finished exactly when the status is final
        AND (finished_at IS NOT NULL) = (status IN ('completed', 'failed', 'cancelled'))
        -- a finished run has no start pending
        AND (finished_at IS NULL OR start_at IS NULL)
        AND concurrency_key <> '' AND priority BETWEEN -1000 AND 1000
        -- only a pending run is held
        AND (NOT held OR status = 'pending')) NOT VALID;
ALTER TABLE cairn.runs VALIDATE CONSTRAINT runs_valid;

ALTER TABLE cairn.steps
    DROP CONSTRAINT steps_seq_check,
    DROP CONSTRAINT steps_name_check,
    DROP CONSTRAINT steps_attempts_check,
    DROP CONSTRAINT steps_status_check,
    DROP CONSTRAINT steps_kind_check,
    ADD CONSTRAINT steps_valid CHECK (
        seq >= 0 AND name <> '' AND attempts >= 0
        AND status IN ('completed', 'failed', 'retrying', 'waiting', 'timed_out')
        AND kind IN ('step', 'sleep', 'signal', 'now', 'random', 'child', 'send', 'enqueue',
                     'event', 'patch')) NOT VALID;
ALTER TABLE cairn.steps VALIDATE CONSTRAINT steps_valid;

ALTER TABLE cairn.messages
    DROP CONSTRAINT messages_shard_check,
    DROP CONSTRAINT messages_attempts_check,
    DROP CONSTRAINT messages_kind_check,
    ADD CONSTRAINT messages_valid CHECK (
        shard >= 0 AND attempts >= 0 AND kind IN ('signal', 'wake', 'cancel')) NOT VALID;
ALTER TABLE cairn.messages VALIDATE CONSTRAINT messages_valid;
