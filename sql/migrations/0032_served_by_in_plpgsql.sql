-- 0032: cairn.served_by (migration 0020) in PL/pgSQL, as cairn.route is
-- since migration 0028, on both deployments.
--
-- Citus plans no SQL-language function that reads a distributed or a
-- reference table ("parameterized queries for SQL functions referencing
-- distributed tables are not supported", even when called with
-- constants), and cairn.workflows is a reference table there: `cairn
-- status`, the console and the HTTP API's run page, which call it for
-- every run they show, failed on Citus. In PL/pgSQL its query is a
-- statement of its own, planned on the coordinator. What it returns is
-- unchanged.
CREATE OR REPLACE FUNCTION cairn.served_by(p_workflow text, p_group text)
RETURNS TABLE (runtime text, unserved text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT coalesce(h.runtime, a.runtime),
           CASE WHEN h.live_until > now() THEN NULL
                WHEN a.live_until > now() THEN format(
                    'no live worker of group "%s" serves workflow "%s": the run moves to '
                    'group "%s", which has one', p_group, p_workflow, a.shard_group)
                WHEN a.workflow IS NULL THEN format(
                    'no live worker serves workflow "%s" (never served)', p_workflow)
                ELSE format('no live worker serves workflow "%s" (last seen %s ago in group %s)',
                            p_workflow, cairn.age_text(now() - a.last_seen), a.shard_group)
           END
    FROM (SELECT 1) one
    LEFT JOIN cairn.workflows h ON h.workflow = p_workflow AND h.shard_group = p_group
    LEFT JOIN LATERAL (SELECT * FROM cairn.workflows w WHERE w.workflow = p_workflow
                       ORDER BY w.live_until > now() DESC, w.last_seen DESC
                       LIMIT 1) a ON true;
END
$$;
