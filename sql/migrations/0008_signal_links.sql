-- 0008: signal links used once.
--
-- `cairn signal-link --once` puts a random nonce into the link's signed
-- token. The worker that takes the link's POST records the nonce here in the
-- same statement that writes the signal, so a second POST of the link finds
-- it and is refused (409) without a second signal. A run's rows go with it.
CREATE TABLE cairn.signal_links (
    nonce text PRIMARY KEY CHECK (nonce ~ '^[0-9a-f]{32}$'),
    run_id bigint NOT NULL REFERENCES cairn.runs (id) ON DELETE CASCADE,
    used_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signal_links_run ON cairn.signal_links (run_id);
