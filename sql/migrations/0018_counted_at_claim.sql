-- 0018: an execution is counted by the claim that takes its run, also when
-- the run waits in the worker's queue.
--
-- The poison guard counts each execution before any code of its run runs
-- (runs.claims). A claim counted only the runs that idle executors took at
-- once; every other run was counted as it left the queue, by an UPDATE of
-- its row on the worker's marker connection. That second row version per
-- run was most of the database's extra work in a drain of no-op runs: the
-- CPU time per run was 1.8 times that of a build without the guard.
--
-- Now the claim counts every run it takes, in the row it writes anyway,
-- and numbers the runs that wait in the queue (queued_seq, from
-- cairn.claim_seq, in the order they wait). A run so numbered by its
-- runner (queued_by) counts as not started while its number is above the
-- runner's started_upto: every claim reads its count as 0. The runner
-- raises started_upto before the run starts, for up to CAIRN_CONCURRENCY
-- queued runs in one UPDATE of its own row. So a worker that crashes leaves
-- counted only the runs that had started or were about to; those that only
-- waited are claimed by the next owner as if never counted.

ALTER TABLE cairn.runs ADD COLUMN queued_by bigint, ADD COLUMN queued_seq bigint;
ALTER TABLE cairn.runners ADD COLUMN started_upto bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE cairn.claim_seq;
