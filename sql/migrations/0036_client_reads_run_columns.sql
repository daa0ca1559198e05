-- 0036: cairn_client reads the columns of cairn.run_view in cairn.runs.
--
-- cairn_client reads runs through the view cairn.run_view (migration 0011),
-- which PostgreSQL checks with the rights of its owner. Citus checks them
-- so only on the coordinator: the statements it sends to the worker nodes
-- read the shards of cairn.runs with the rights of the session's user, so
-- an application's role was refused the view on a distributed database
-- ("permission denied for table runs_102017"). The role now may SELECT the
-- view's columns of cairn.runs, on both deployments (Citus gives the
-- shards the table's grants, also those of a part the rebalancer moves):
-- what the view shows and nothing more. The other columns of runs (claims,
-- leases, the queue's state), every other table and every write stay
-- refused; the view stays the interface the documentation names.
GRANT SELECT (id, workflow, key, shard_group, shard, status, input, output, error, attempt,
              max_attempts, cancel_requested, parent_id, created_at, scheduled_at,
              started_at, updated_at, finished_at)
    ON cairn.runs TO cairn_client;
