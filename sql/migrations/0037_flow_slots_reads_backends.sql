-- 0037: cairn.flow_slots reads the lease backends from
-- pg_stat_get_activity, not from pg_stat_activity.
--
-- A claim under a `concurrency` limit counts the slots whose runner's lease
-- connection lives (migration 0010). pg_stat_activity is a view that also
-- reads pg_authid, for user names. On Citus, slots and runners are reference
-- tables, and Citus runs a statement over them as SQL text with the view
-- expanded, so pg_authid was read with the rights of the worker's role: a
-- worker that is not a superuser failed every claim of a limited workflow
-- ("permission denied for table pg_authid"). The function under the view
-- gives the same backends, with the same visibility, and reads no
-- catalogue of roles; the same function on both deployments.
CREATE OR REPLACE FUNCTION cairn.flow_slots(p_workflow text, p_limit integer, p_want integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_used integer;
BEGIN
    PERFORM 1 FROM cairn.limits WHERE workflow = p_workflow FOR UPDATE;
    SELECT count(*) INTO v_used FROM cairn.slots s JOIN cairn.runners r ON r.id = s.runner_id
    WHERE s.workflow = p_workflow
      AND EXISTS (SELECT 1 FROM pg_stat_get_activity(NULL) a WHERE a.pid = r.lease_pid);
    IF v_used + p_want > p_limit THEN
        UPDATE cairn.limits SET waiting = true WHERE workflow = p_workflow AND NOT waiting;
    END IF;
    RETURN least(p_want, greatest(p_limit - v_used, 0));
END;
$$;
