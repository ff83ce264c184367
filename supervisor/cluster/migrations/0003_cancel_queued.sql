-- Version 3 (issue 15): stop of a task no host has claimed, for supervise_operator (granted
-- in roles.sql) without UPDATE rights on the tasks table.
CREATE FUNCTION supervise_cancel_queued(task text, requested_by text)
    RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    job bigint;
    gen integer;
BEGIN
    UPDATE supervise_tasks SET state = 'abandoned', verdict = 'ABANDONED',
        error = 'stopped before any host claimed it (' || requested_by || ')',
        finished_at = to_char(now() AT TIME ZONE 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        updated_at = now()
    WHERE id = task AND state = 'queued' RETURNING generation INTO gen;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR job IN SELECT id FROM procrastinate_jobs
               WHERE queueing_lock = task AND status = 'todo' LOOP
        PERFORM procrastinate_cancel_job_v1(job, false, true);
    END LOOP;
    INSERT INTO supervise_events (transition_id, task_id, host_id, generation, event,
                                  state)
    VALUES ('cancel:' || task || ':' || gen, task, '', gen, 'stopped', 'abandoned')
    ON CONFLICT (transition_id) DO NOTHING;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION supervise_cancel_queued(text, text) FROM PUBLIC;
