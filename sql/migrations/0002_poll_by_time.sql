-- The poller walks due messages in time order and keeps those of shards it
-- owns (a lookup in shard_leases per message), so a claim of N messages reads
-- about N / (share of shards owned) index entries instead of every due
-- message of every owned shard. messages_due stays for per-shard scans.
CREATE INDEX messages_deliver ON cairn.messages (deliver_at, id);

-- messages is a hot queue: rows are inserted and deleted all the time. Keep
-- its statistics and visibility map fresh so the planner keeps walking
-- messages_deliver and dead rows do not pile up.
ALTER TABLE cairn.messages SET (autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000);
