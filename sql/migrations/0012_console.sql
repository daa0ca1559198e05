-- 0012: the operator console (`cairn ui`) lists runs newest first, a page
-- at a time (keyset: id < the last id seen), filtered by workflow, status,
-- key and creation time. Unfiltered and by status, the primary key and
-- runs_status (status, id) already serve that order. A filter by workflow
-- needs runs_workflow, or it would walk the primary key past every run of
-- the other workflows (it also gives the workflows by a skip scan, for a key
-- looked up without its workflow). A time range is listed in (created_at,
-- id) order from runs_created.
CREATE INDEX runs_workflow ON cairn.runs (workflow, id);
CREATE INDEX runs_created ON cairn.runs (created_at, id);
