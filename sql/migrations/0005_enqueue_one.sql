-- 0005: one run enqueued by one function call.

-- The client's single enqueue: a short call whose statements PL/pgSQL plans
-- once per session, where the batch path's array statement is parsed and
-- planned on every call. Inserts the run and its start message, or, when
-- (workflow, key) exists, returns that run (with its output and error when
-- want_result and it has finished). Each statement reads a fresh snapshot,
-- so a run that a concurrent enqueue of the same key committed is found.
-- Wakes nobody: the caller wakes the shard's owner after the commit.
CREATE FUNCTION cairn.enqueue_one(p_workflow text, p_key text, p_group text, p_shard integer,
    p_input jsonb, p_max_attempts integer, p_delay_ms bigint, p_at_ms bigint,
    p_want_result boolean,
    OUT id bigint, OUT existed boolean, OUT status text, OUT output text, OUT error text)
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := CASE WHEN p_at_ms IS NOT NULL THEN to_timestamp(p_at_ms / 1000.0)
                             ELSE now() + p_delay_ms * interval '1 millisecond' END;
    v_finished timestamptz;
BEGIN
    INSERT INTO cairn.runs AS r (workflow, key, shard_group, shard, input, max_attempts,
                                 scheduled_at)
    VALUES (p_workflow, p_key, p_group, p_shard, p_input, p_max_attempts, v_at)
    ON CONFLICT (workflow, key) DO NOTHING
    RETURNING r.id, r.status INTO id, status;
    IF FOUND THEN
        INSERT INTO cairn.messages (run_id, shard_group, shard, kind, deliver_at)
        VALUES (id, p_group, p_shard, 'start', v_at);
        existed := false;
        RETURN;
    END IF;
    existed := true;
    SELECT r.id, r.status, r.output::text, r.error, r.finished_at
      INTO id, status, output, error, v_finished
      FROM cairn.runs r WHERE r.workflow = p_workflow AND r.key = p_key;
    IF v_finished IS NULL OR NOT p_want_result THEN
        output := NULL;
        error := NULL;
    END IF;
END
$$;
