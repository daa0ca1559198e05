-- 0034: a signal is one call in its run's part.
--
-- The client's signal was one statement of CTEs: it locks the last run of
-- the chain (FOR SHARE), records a signal link's nonce used once, inserts
-- the signal and the message that wakes the run, and says what it did. On
-- Citus each INSERT in a CTE is a subplan of its own, whose rows pass
-- through the coordinator: 8 subplans for one signal. The same statement
-- is now the body of a function of the part (PL/pgSQL: Citus plans no
-- statement of an SQL function that has parameters), which `cairn migrate
-- --citus` distributes by p_part, colocated with cairn.runs: Citus sends
-- the call whole to the node of the part (one task), where every statement
-- is on its own shards. On one server it is a function call around the same
-- statement. The wake-up of the run's owner stays a statement of its own,
-- on the coordinator, where the relay listens.
--
-- p_run the run the signal is sent to (the last of its chain gets it), its
-- name and payload (JSON text, sealed when keys are set), p_max the most
-- unconsumed signals a run may hold (cairn.settings max_pending_signals),
-- p_nonce a signal link's nonce (NULL: none), p_part the run's part
-- (cairn.run_part). One row, none when the run does not exist: whether it
-- refused (finished, full, the link used), how many rows it wrote, why it
-- refused, what it did ('delivered' to a run that waits for it, else
-- 'buffered') and the run it wrote for.
CREATE FUNCTION cairn.signal_in(p_run bigint, p_name text, p_payload text, p_max integer,
    p_nonce text, p_part integer)
RETURNS TABLE (refused boolean, written bigint, why text, outcome text, target bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH r AS (SELECT id, shard_group, shard, finished_at IS NOT NULL AS done,
             (SELECT count(*) FROM cairn.signals g
              WHERE g.part = p_part AND g.run_id = runs.id AND g.consumed_by_seq IS NULL)
             AS pending
           FROM cairn.runs
           WHERE part = p_part
             AND id = (SELECT coalesce((SELECT max(c.id) FROM cairn.runs c
                                        WHERE c.part = p_part
                                          AND c.chain_id = coalesce(x.chain_id, x.id)), x.id)
                       FROM cairn.runs x WHERE x.part = p_part AND x.id = p_run)
           FOR SHARE),
used AS (INSERT INTO cairn.signal_links (nonce, run_id, part)
         SELECT p_nonce, id, p_part FROM r WHERE p_nonce IS NOT NULL AND NOT done AND pending < p_max
         ON CONFLICT DO NOTHING RETURNING 1),
ok AS (SELECT * FROM r WHERE NOT done AND pending < p_max
         AND (p_nonce IS NULL OR EXISTS (SELECT 1 FROM used))),
s AS (INSERT INTO cairn.signals (run_id, part, name, payload)
      SELECT id, p_part, p_name, p_payload::jsonb FROM ok RETURNING run_id),
m AS (INSERT INTO cairn.messages (run_id, part, shard_group, shard, kind)
      SELECT id, p_part, shard_group, shard, 'signal' FROM ok RETURNING 1)
SELECT done OR pending >= p_max OR NOT EXISTS (SELECT 1 FROM ok),
       (SELECT count(*) FROM s) + (SELECT count(*) FROM m),
       CASE WHEN p_nonce IS NOT NULL AND EXISTS (SELECT 1 FROM cairn.signal_links
                                                 WHERE part = p_part AND nonce = p_nonce)
            THEN 'this link was used already'
            WHEN done THEN 'it has already finished'
            WHEN pending >= p_max
            THEN 'it holds ' || pending
                 || ' unconsumed signals; the limit (max_pending_signals in cairn.settings) is '
                 || p_max
            ELSE 'this link was used already' END,
       CASE WHEN EXISTS (SELECT 1 FROM s) AND EXISTS (SELECT 1 FROM cairn.steps
                  WHERE part = p_part AND run_id = r.id AND kind = 'signal'
                    AND status = 'waiting' AND name = p_name)
            THEN 'delivered' ELSE 'buffered' END,
       r.id
FROM r;
END
$$;
