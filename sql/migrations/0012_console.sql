-- 0012: the operator console (`cairn ui`) lists runs newest first, a page
-- at a time (keyset: id < the last id seen). Unfiltered, and by status, the
-- primary key and runs_status (status, id) already serve that order; a
-- filter by workflow needs its own, or it would walk the primary key past
-- every run of the other workflows.
CREATE INDEX runs_workflow ON cairn.runs (workflow, id);
