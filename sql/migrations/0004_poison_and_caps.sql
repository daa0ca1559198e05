-- 0004: poison runs and load caps.

-- Claims since the run last made progress (a commit of its worker). The
-- claim counts it, any progress resets it; a run claimed more than
-- CAIRN_POISON_AFTER times without progress kept stopping its workers and
-- fails with a message that says so.
ALTER TABLE cairn.runs ADD COLUMN claims integer NOT NULL DEFAULT 0 CHECK (claims >= 0);

-- Limits every front door and every worker reads from here, so what the
-- client accepts a worker can always load. Change them with UPDATE.
--   max_pending_signals  unconsumed signals one run may hold
--   max_journal_bytes    stored size of one run's journal (outputs and errors)
INSERT INTO cairn.settings (name, value) VALUES
    ('max_pending_signals', '1000'),
    ('max_journal_bytes', '67108864')
ON CONFLICT (name) DO NOTHING;
