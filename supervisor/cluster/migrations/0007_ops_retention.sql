-- Version 7 (issue 25, retention): supervise_prune(older_than, batch) removes one batch of
-- ended tasks (a final state, unchanged for older_than seconds), their events, control
-- requests and ended procrastinate jobs, then retired hosts (not alive, no heartbeat for
-- older_than seconds, no task left naming them). SECURITY DEFINER: supervise_engine (the
-- sweeper's periodic prune) gets EXECUTE in roles.sql and no DELETE on any table, so no
-- login of the fleet can remove a live task. The final states are FleetState's FINAL
-- (supervisor/taskdir/states.py; tests/test_cluster_retention.py checks they agree).
-- Rows another prune holds are skipped (FOR UPDATE SKIP LOCKED): two prunes at once
-- split the work, and each row is counted by the one that removed it.
CREATE FUNCTION supervise_prune(older_than double precision, batch integer)
    RETURNS TABLE (tasks bigint, events bigint, controls bigint, jobs bigint, hosts bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
AS $$
DECLARE
    cutoff timestamptz := now() - make_interval(secs => older_than);
    doomed text[];
BEGIN
    SELECT coalesce(array_agg(id), '{}') INTO doomed FROM (
        SELECT id FROM supervise_tasks
        WHERE state IN ('completed', 'failed', 'abandoned', 'superseded', 'rejected',
                        'host_lost')
            AND updated_at < cutoff
        ORDER BY updated_at, id LIMIT batch FOR UPDATE SKIP LOCKED) picked;
    DELETE FROM supervise_events WHERE task_id = ANY(doomed);
    GET DIAGNOSTICS events = ROW_COUNT;
    DELETE FROM supervise_controls WHERE task_id = ANY(doomed);
    GET DIAGNOSTICS controls = ROW_COUNT;
    DELETE FROM procrastinate_jobs WHERE args->>'task_id' = ANY(doomed)
        AND status IN ('succeeded', 'failed', 'cancelled', 'aborted');
    GET DIAGNOSTICS jobs = ROW_COUNT;
    DELETE FROM supervise_tasks WHERE id = ANY(doomed);
    GET DIAGNOSTICS tasks = ROW_COUNT;
    DELETE FROM supervise_hosts WHERE host_id IN (
        SELECT h.host_id FROM supervise_hosts h
        WHERE h.state <> 'alive' AND h.heartbeat_at < cutoff
            AND NOT EXISTS (SELECT 1 FROM supervise_tasks t
                            WHERE t.owner_host = h.host_id OR t.host = h.host_id)
        ORDER BY h.host_id LIMIT batch FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS hosts = ROW_COUNT;
    RETURN NEXT;
END
$$;
REVOKE ALL ON FUNCTION supervise_prune(double precision, integer) FROM PUBLIC;
