-- 0021: a parent that waits for its children is woken once its wait can be
-- met, not once per child.
--
-- Until now the commit that finished a child gave its parent a signal and a
-- message, so a parent waiting for N children was claimed, and replayed its
-- whole journal, up to N times. Now a run that suspends in a wait for
-- children (cairn_child_wait, cairn_child_wait_all/_any/_first) records how
-- many of them must still end (child_waits.need) and which of them it waits
-- for (child_awaited); the commit that finishes an awaited child counts it
-- down, and gives the parent its message only when the count reaches zero.
-- The child's outcome still arrives as the signal cairn.child:ID.

-- The journal's wait for many children (cairn_child_wait_all and the like).
ALTER TABLE cairn.steps
    DROP CONSTRAINT steps_valid,
    ADD CONSTRAINT steps_valid CHECK (
        seq >= 0 AND name <> '' AND attempts >= 0
        AND status IN ('completed', 'failed', 'retrying', 'waiting', 'timed_out')
        AND kind IN ('step', 'sleep', 'signal', 'now', 'random', 'child', 'send', 'enqueue',
                     'event', 'patch', 'children')) NOT VALID;
ALTER TABLE cairn.steps VALIDATE CONSTRAINT steps_valid;

-- The planner's view of how many signals a run holds. A parent that waits
-- for thousands of children holds most of the signals there are, and the
-- statistics then say that every run does (signals.run_id has one distinct
-- value): for each run a claim took, the planner walked signals_pkey in id
-- order to find its oldest signals, reading every signal of the table for
-- a run that has none (a child), 7 to 30 ms a run; in a fan-out of 100,000
-- the claims of 256 children ran past the statement timeout. Set once, it
-- says that a run holds few signals, whatever ANALYZE samples, and each
-- claimed run's signals are read through signals_unconsumed. A run that
-- does hold many (that parent) is read the same way, which is right for it
-- too.
ALTER TABLE cairn.signals ALTER COLUMN run_id SET (n_distinct = -0.5);
ANALYZE cairn.signals;

-- One row per run that started children (written with the children), and
-- its current wait for them: the journal position of the wait (NULL before
-- its first) and how many more of the awaited children must end before the
-- run is woken. The row is also the lock that orders a wait's start with
-- the ends of its children (cairn.children_sync).
CREATE TABLE cairn.child_waits (
    run_id bigint PRIMARY KEY REFERENCES cairn.runs (id) ON DELETE CASCADE,
    seq integer,
    need integer
);

-- The children a run waits for that had not ended when its wait began, by
-- child; deleted as each ends. No foreign keys: each would lock the runs
-- it names, which the children's own commits update.
CREATE TABLE cairn.child_awaited (
    child_id bigint PRIMARY KEY,
    run_id bigint NOT NULL,
    seq integer NOT NULL
);

-- The waits and the ends of children of one commit statement, in a function
-- so that each statement of it reads with a snapshot taken after the locks
-- (a single statement reads with the snapshot it began with, and would
-- miss a child that ended while it waited for a lock). Both sides lock the
-- parent's child_waits row first: a child whose end commits before a wait
-- takes that lock is seen by the wait's count; one whose end comes after
-- finds the wait's child_awaited row and counts down. Every lock is taken
-- in run order, so two commits cannot deadlock on them.
--
--   p_ok                   the runs of the statement its fence let through:
--                          only their waits and ends count
--   w_run, w_seq, w_want   runs that suspend in a wait for children: the
--                          wait's seq, and how many of the children given
--                          must end (their ends not yet taken by the run)
--   a_run, a_child         those children, by run
--   e_run, e_child,        runs that ended (their commits are this
--   e_parent               statement's), the child each is (the first run of
--                          its chain: the run its parent started), and
--                          their parents
--
-- Returns the runs to wake now: a wait whose count reached zero, a wait
-- already met as it began, and the parent of an ended child that has no
-- child_waits row (its children were started before this migration: it is
-- told of every child, as it was).
CREATE FUNCTION cairn.children_sync(p_ok bigint[],
                                    w_run bigint[], w_seq integer[], w_want integer[],
                                    a_run bigint[], a_child bigint[],
                                    e_run bigint[], e_child bigint[], e_parent bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT array_agg(x.r), array_agg(x.q), array_agg(x.k) INTO w_run, w_seq, w_want
        FROM unnest(w_run, w_seq, w_want) AS x(r, q, k) JOIN unnest(p_ok) o(id) ON o.id = x.r;
    SELECT array_agg(x.r), array_agg(x.c) INTO a_run, a_child
        FROM unnest(a_run, a_child) AS x(r, c) JOIN unnest(w_run) o(id) ON o.id = x.r;
    SELECT array_agg(x.c), array_agg(x.p) INTO e_child, e_parent
        FROM unnest(e_run, e_child, e_parent) AS x(r, c, p) JOIN unnest(p_ok) o(id) ON o.id = x.r;
    INSERT INTO cairn.child_waits (run_id)
        SELECT DISTINCT r FROM unnest(w_run) r ORDER BY r
        ON CONFLICT (run_id) DO NOTHING;
    PERFORM 1 FROM cairn.child_waits
        WHERE run_id IN (SELECT unnest(w_run) UNION SELECT unnest(e_parent))
        ORDER BY run_id FOR UPDATE;

    -- Ends: an awaited child counts down its parent's current wait.
    RETURN QUERY
    WITH gone AS (
        DELETE FROM cairn.child_awaited a USING unnest(e_child, e_parent) AS e(c, p)
        WHERE a.child_id = e.c AND a.run_id = e.p
        RETURNING a.run_id, a.seq),
    hit AS (
        SELECT g.run_id, count(*)::integer AS n FROM gone g
        JOIN cairn.child_waits w ON w.run_id = g.run_id AND w.seq = g.seq
        GROUP BY g.run_id),
    down AS (
        UPDATE cairn.child_waits w SET need = w.need - hit.n FROM hit
        WHERE w.run_id = hit.run_id
        RETURNING w.run_id, w.need, hit.n)
    SELECT run_id FROM down WHERE need <= 0 AND need + n > 0
    UNION
    SELECT p FROM unnest(e_parent) p
    WHERE NOT EXISTS (SELECT 1 FROM cairn.child_waits w WHERE w.run_id = p);

    -- Waits: the children given that have ended (their signal is there,
    -- not taken) count at once; the others are awaited.
    RETURN QUERY
    WITH kid AS (
        SELECT DISTINCT a.r, a.c, EXISTS (
                   SELECT 1 FROM cairn.signals g
                   WHERE g.run_id = a.r AND g.name = 'cairn.child:' || a.c
                     AND g.consumed_by_seq IS NULL) AS ended
        FROM unnest(a_run, a_child) AS a(r, c)),
    ended AS (
        SELECT r, count(*)::integer AS n FROM kid WHERE ended GROUP BY r),
    set_ AS (
        UPDATE cairn.child_waits w SET seq = x.q, need = x.k - coalesce(ended.n, 0)
        FROM unnest(w_run, w_seq, w_want) AS x(r, q, k) LEFT JOIN ended ON ended.r = x.r
        WHERE w.run_id = x.r
        RETURNING w.run_id, w.seq, w.need),
    mark AS (
        INSERT INTO cairn.child_awaited (child_id, run_id, seq)
        SELECT kid.c, kid.r, s.seq FROM kid JOIN set_ s ON s.run_id = kid.r
        WHERE NOT kid.ended AND s.need > 0
        ON CONFLICT (child_id) DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq)
    SELECT run_id FROM set_ WHERE need <= 0;
END $$;

-- A child start is journaled in the commit that inserts the child, under
-- an id taken beforehand from runs' sequence (a worker takes a block of
-- them in one statement), with the children of the run that a lost journal
-- entry left behind (cairn.child:RUN:SEQ with no entry at SEQ: found
-- again, not started twice).
CREATE FUNCTION cairn.child_ids(p_run bigint, p_n integer, p_orphans boolean)
RETURNS TABLE (id bigint, seq integer, workflow text)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT o.id, o.seq, o.workflow
    FROM (SELECT r.id, r.workflow,
                 CASE WHEN split_part(r.key, ':', 3) ~ '^[0-9]{1,9}$'
                      THEN split_part(r.key, ':', 3)::integer END AS seq
          FROM cairn.runs r
          WHERE p_orphans AND r.parent_id = p_run
            AND r.key LIKE 'cairn.child:' || p_run || ':%') o
    WHERE o.seq IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.run_id = p_run AND s.seq = o.seq)
    UNION ALL
    SELECT nextval(pg_get_serial_sequence('cairn.runs', 'id')), NULL, NULL
    FROM generate_series(1, p_n)
$$;
