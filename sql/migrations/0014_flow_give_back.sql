-- 0014: slots of fleet-wide limits given back under the limit's lock.
--
-- A claim that finds a limit full marks it waiting (cairn.flow_slots, under
-- the limit's row lock), and whoever gives a slot back wakes every runner
-- when the limit is waiting. Given back by one statement that deleted the
-- slot and then read the mark, a slot could go unseen: a claim counted the
-- slot before the delete committed, and marked the limit waiting after the
-- statement had read the mark, or before its commit. The slot then stayed
-- free until another was given back or a poll came (CAIRN_POLL_INTERVAL).
-- Here each limit's row is locked first: a claim that counted the slot has
-- committed its mark before the mark is read, and a claim after this one
-- waits and counts the slot as free.

-- Gives back the slots (p_runs[i], taken by runner p_runners[i]) and wakes
-- every runner for each limit a claim found full meanwhile. A slot that
-- another runner took over since (the run moved with its shard) is not
-- given back. Returns the workflows of the slots given back, once each.
CREATE FUNCTION cairn.flow_give_back(p_runs bigint[], p_runners bigint[])
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    v_workflow text;
BEGIN
    FOR v_workflow IN
        SELECT DISTINCT s.workflow FROM cairn.slots s
        JOIN unnest(p_runs, p_runners) AS g(run_id, runner_id)
          ON g.run_id = s.run_id AND g.runner_id = s.runner_id
        ORDER BY 1
    LOOP
        PERFORM 1 FROM cairn.limits WHERE workflow = v_workflow FOR UPDATE;
        DELETE FROM cairn.slots s USING unnest(p_runs, p_runners) AS g(run_id, runner_id)
        WHERE s.workflow = v_workflow AND s.run_id = g.run_id AND s.runner_id = g.runner_id;
        UPDATE cairn.limits SET waiting = false WHERE workflow = v_workflow AND waiting;
        IF FOUND THEN
            PERFORM pg_notify('cairn_wake', r.id::text) FROM cairn.runners r;
        END IF;
        RETURN NEXT v_workflow;
    END LOOP;
END;
$$;
