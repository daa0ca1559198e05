-- 0007: writers wake a runner only while it may be idle.
--
-- A runner whose poller is busy claiming (each claim found work, so it
-- claims again as soon as it has room) sets idle = false, and writers skip
-- its wake-up: no notification, no relay hop, no second commit on the lock
-- PostgreSQL serialises notifying commits on. Before its poller sleeps it
-- sets idle = true, commits, and claims once more: a write that saw
-- idle = false committed before that claim's snapshot, so the claim finds
-- it (dispatch.c, poller_main).
ALTER TABLE cairn.runners ADD COLUMN idle boolean NOT NULL DEFAULT true;
