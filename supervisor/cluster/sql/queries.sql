-- supervise: every statement the fleet's modules send, by name (issue 23).
--
-- Loaded by supervisor/cluster/sqlfiles.py, as procrastinate loads its sql/queries.sql: a
-- line "-- name --" starts a query, the comment lines right after it describe it (they are
-- not sent), and the text up to the next name is the query. Parameters are psycopg's
-- (%s, in order); {channel} is an identifier filled in with psycopg.sql (LISTEN takes no
-- parameter). The schema itself is in ../migrations/, the roles in ../roles.sql.

-- ---------------------------------------------------------------- schema (schema.py)

-- init_lock --
-- cluster init's and cluster roles' transaction-wide advisory lock (schema.INIT_LOCK).
SELECT pg_advisory_xact_lock(%s);

-- create_version_table --
-- The table that records each migration applied (created before the first one).
CREATE TABLE IF NOT EXISTS supervise_schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- schema_version --
SELECT coalesce(max(version), 0) FROM supervise_schema_version;

-- record_version --
INSERT INTO supervise_schema_version (version) VALUES (%s);

-- has_version_table --
SELECT to_regclass('supervise_schema_version') IS NOT NULL;

-- has_procrastinate --
SELECT to_regclass('procrastinate_jobs') IS NOT NULL;

-- server_version --
SHOW server_version;

-- engine_rights --
-- What an engine writes (supervise_engine in roles.sql grants these), and the login.
SELECT has_table_privilege('supervise_tasks', 'UPDATE')
    AND has_table_privilege('supervise_hosts', 'INSERT')
    AND has_table_privilege('supervise_events', 'INSERT')
    AND has_table_privilege('procrastinate_jobs', 'UPDATE'), current_user;

-- alive_heartbeat --
-- An alive host's heartbeat, its age (seconds) and its host_timeout.
SELECT heartbeat_at, extract(epoch FROM now() - heartbeat_at)::float, host_timeout
FROM supervise_hosts WHERE host_id = %s AND state = 'alive';

-- ---------------------------------------------------------------- roles (roles.py)

-- tasks_table --
-- The tasks table's oid, NULL before cluster init.
SELECT to_regclass('supervise_tasks');

-- ---------------------------------------------------------------- submit (submit.py)

-- insert_task --
INSERT INTO supervise_tasks (id, name, spec, host, queue)
VALUES (%s, %s, %s::jsonb, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING id;

-- defer_job --
-- procrastinate's own defer, as its connector calls it (procrastinate_defer_jobs_v1,
-- procrastinate 3.10 sql/queries.sql defer_jobs): run on our connection, the job is
-- inserted in the task row's transaction. Parameters: queue, task name, lock, args.
SELECT (procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, 0, NULL, %s, %s::jsonb,
    NULL::timestamptz)::procrastinate_job_to_defer_v1]))[1];

-- ---------------------------------------------------------------- claim (claim.py)

-- claim_task --
-- The one statement that makes a start exactly-once: only a queued row is taken.
UPDATE supervise_tasks SET state = 'claimed', owner_host = %s, generation = generation + 1,
    claimed_at = now(), updated_at = now()
WHERE id = %s AND state = 'queued'
RETURNING generation, spec;

-- reject_task --
UPDATE supervise_tasks SET state = 'rejected', error = %s, updated_at = now()
WHERE id = %s AND generation = %s;

-- ---------------------------------------------------------------- ownership (ownership.py)

-- owned_rows --
SELECT id, owner_host, generation, state FROM supervise_tasks WHERE id = ANY(%s);

-- still_queued --
SELECT 1 FROM supervise_tasks WHERE id = %s AND state = 'queued';

-- defer_later --
-- A new job for a still queued task on its queue, some seconds from now; a task put back
-- (generation > 0: claimed before) keeps the requeue priority (issue 25). Parameters: task
-- name, the requeue priority, args, seconds, task id.
SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(queue, %s, CASE WHEN generation > 0 THEN %s
    ELSE 0 END, NULL, id, %s::jsonb,
    now() + make_interval(secs => %s))::procrastinate_job_to_defer_v1])
FROM supervise_tasks WHERE id = %s AND state = 'queued';

-- ---------------------------------------------------------------- writer (writer.py)

-- update_task --
-- A transition, written only while this host owns the claim's generation.
UPDATE supervise_tasks SET state = %s, session_id = coalesce(%s, session_id),
    started_at = coalesce(%s, started_at), finished_at = %s, exit_code = %s,
    retry_count = %s, failure_reason = %s, verdict = %s, error = coalesce(%s, error),
    updated_at = now()
WHERE id = %s AND owner_host = %s AND generation = %s;

-- insert_event --
-- One transition's event row; its id makes a replayed or repeated one count once.
INSERT INTO supervise_events (transition_id, task_id, host_id, generation, event, state)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (transition_id) DO NOTHING;

-- heartbeat --
-- Every beat says 'alive': a host the sweeper declared dead that beats again is alive
-- again (its lost tasks stay lost: their generation moved on). lost_at/stopped_at keep
-- the last loss and stop for the operator. It returns the hosts alive (before this beat,
-- at least 1) and the server's connection slots, which size the engine's pool's burst.
INSERT INTO supervise_hosts (host_id, capacity, running, version, queues, last_error,
    host_timeout, on_host_lost, connections, stopped_host_grace)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (host_id) DO UPDATE SET heartbeat_at = now(), capacity = excluded.capacity,
    running = excluded.running, version = excluded.version, queues = excluded.queues,
    last_error = excluded.last_error,
    host_timeout = excluded.host_timeout, on_host_lost = excluded.on_host_lost,
    connections = excluded.connections, stopped_host_grace = excluded.stopped_host_grace,
    state = 'alive'
RETURNING greatest(1, (SELECT count(*) FROM supervise_hosts WHERE state = 'alive'))::int,
    current_setting('max_connections')::int,
    current_setting('superuser_reserved_connections')::int;

-- host_stopped --
-- A clean stop: the sweeper never declares a stopped host dead.
UPDATE supervise_hosts SET state = 'stopped', stopped_at = now(), heartbeat_at = now(),
    running = %s
WHERE host_id = %s;

-- ---------------------------------------------------------------- control (control.py, listener.py)

-- task_owner --
SELECT id, state, owner_host, generation FROM supervise_tasks WHERE id = %s;

-- host_alive --
SELECT state, extract(epoch FROM now() - heartbeat_at)::float AS age, host_timeout
FROM supervise_hosts WHERE host_id = %s;

-- listen --
LISTEN {channel};

-- notify --
-- Parameters: the channel, the payload.
SELECT pg_notify(%s, %s);

-- insert_control --
INSERT INTO supervise_controls (task_id, host_id, verb, requested_by)
VALUES (%s, %s, %s, %s) RETURNING id;

-- control_answer --
SELECT done_at IS NOT NULL, ok, result FROM supervise_controls WHERE id = %s;

-- answer_control --
-- The host's answer, or the requester's withdrawal of a request not answered in time.
UPDATE supervise_controls SET done_at = now(), ok = %s, result = %s
WHERE id = %s AND done_at IS NULL;

-- cancel_queued --
-- stop of a task no host has claimed (migration 0003's SECURITY DEFINER function).
SELECT supervise_cancel_queued(%s, %s);

-- pending_controls --
SELECT c.id, c.task_id, c.verb, t.owner_host, t.generation FROM supervise_controls c
LEFT JOIN supervise_tasks t ON t.id = c.task_id
WHERE c.host_id = %s AND c.done_at IS NULL ORDER BY c.id;

-- task_rows --
-- supervise show / wait of tasks on other hosts: the manifest's summary fields.
SELECT id AS task_id, name, state AS status, owner_host, generation, restarted_from, queue,
    host, session_id, started_at, finished_at, exit_code, retry_count, failure_reason,
    verdict, error, submitted_at, claimed_at, updated_at
FROM supervise_tasks WHERE id = ANY(%s);

-- task_events --
SELECT at, host_id, generation, event, state FROM supervise_events
WHERE task_id = %s ORDER BY at, id;

-- ---------------------------------------------------------------- the operators' view (fleet.py)

-- fleet_hosts --
SELECT host_id, state, round(extract(epoch FROM now() - heartbeat_at)::numeric, 1)::float
    AS age_s, capacity, running, version, queues, last_error, heartbeat_at, lost_at,
    stopped_at, host_timeout, on_host_lost, connections
FROM supervise_hosts ORDER BY host_id;


-- ---------------------------------------------------------------- the sweeper (sweeper.py)

-- sweep_lock --
SELECT pg_try_advisory_xact_lock(%s);

-- sweep_hosts --
-- Each host, its heartbeat's age and, once stopped, its stop's age (seconds) and grace.
SELECT host_id, state, extract(epoch FROM now() - heartbeat_at)::float, host_timeout,
    on_host_lost, extract(epoch FROM now() - stopped_at)::float, stopped_host_grace
FROM supervise_hosts;

-- server_uptime --
SELECT extract(epoch FROM now() - pg_postmaster_start_time())::float;

-- mark_dead --
UPDATE supervise_hosts SET state = 'dead', lost_at = now()
WHERE host_id = ANY(%s) AND state = 'alive'
    AND heartbeat_at < now() - make_interval(secs => host_timeout)
RETURNING host_id;

-- dead_hosts_tasks --
-- In submission order: the order their new jobs are deferred in (issue 25).
SELECT id, state, owner_host, generation, host, session_id FROM supervise_tasks
WHERE owner_host = ANY(%s) AND state = ANY(%s) ORDER BY submitted_at, id FOR UPDATE;

-- requeue_task --
UPDATE supervise_tasks SET state = 'queued', owner_host = NULL, generation = generation + 1,
    claimed_at = NULL, updated_at = now()
WHERE id = %s AND owner_host = %s AND generation = %s AND state = %s;

-- lose_task --
UPDATE supervise_tasks SET state = %s, generation = generation + 1, updated_at = now()
WHERE id = %s AND owner_host = %s AND generation = %s AND state = %s;

-- restart_task --
UPDATE supervise_tasks SET state = 'queued', owner_host = NULL, generation = generation + 1,
    restarted_from = restarted_from || jsonb_build_array(%s::jsonb), session_id = NULL,
    started_at = NULL, finished_at = NULL, exit_code = NULL, failure_reason = NULL,
    verdict = NULL, claimed_at = NULL, updated_at = now()
WHERE id = %s AND owner_host = %s AND generation = %s AND state = %s;

-- stalled_jobs --
SELECT j.id, j.queueing_lock FROM procrastinate_jobs j
LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
WHERE j.status = 'doing'
    AND (w.id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %s))
ORDER BY j.id FOR UPDATE OF j SKIP LOCKED;

-- waiting_job --
SELECT 1 FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo';

-- retry_job --
SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL);

-- notify_retried_job --
-- A retry is an UPDATE, and procrastinate notifies only on INSERT (its trigger
-- procrastinate_jobs_notify_queue_job_inserted_v1): without this, the retried job would
-- wait for a worker's next poll (5 s by default). The payload is that trigger's.
SELECT pg_notify(channel, json_build_object('type', 'job_inserted', 'job_id', id)::text)
FROM procrastinate_jobs,
    unnest(ARRAY['procrastinate_queue_v1#' || queue_name, 'procrastinate_any_queue_v1']) channel
WHERE id = %s;

-- fail_job --
SELECT procrastinate_finish_job_v1(%s, 'failed', false);

-- defer_requeued --
-- A waiting job for a task queued again, at the requeue priority: ahead of every new
-- submission (priority 0; procrastinate_fetch_job_v2 takes priority DESC, id ASC).
-- Parameters: task name, priority, args, task id.
SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(queue, %s, %s, NULL, id, %s::jsonb,
    NULL::timestamptz)::procrastinate_job_to_defer_v1])
FROM supervise_tasks WHERE id = %s;

-- board_hosts --
-- The board's hosts (supervise serve with [cluster]): age_s in seconds since the heartbeat.
SELECT host_id, state, round(extract(epoch FROM now() - heartbeat_at)::numeric, 1)::float
    AS age_s, capacity, running, version, last_error
FROM supervise_hosts ORDER BY host_id;

-- board_tasks --
-- The board's task rows, live ones first. Parameters: the final states, the row limit.
SELECT id, name, state, owner_host, host, generation, exit_code, failure_reason, error,
    round(extract(epoch FROM now() - updated_at)::numeric, 1)::float AS age_s
FROM supervise_tasks ORDER BY state = ANY(%s), updated_at DESC, id LIMIT %s;

-- board_task_count --
SELECT count(*) FROM supervise_tasks;

-- ---------------------------------------------------------------- conn (issue 25: connections.py)

-- unlisten --
UNLISTEN {channel};

-- round_trip --
-- The LISTEN connection's health check: one round trip on it, no NOTIFY.
SELECT 1;

-- ---------------------------------------------------------------- queue (issue 25)

-- raise_waiting_job --
-- A task put back to queued whose job waits already (rule (d) retried it at priority 0)
-- keeps its place: its job is raised to the requeue priority. Parameters: the priority,
-- the task id (its job's queueing_lock).
UPDATE procrastinate_jobs SET priority = greatest(priority, %s)
WHERE queueing_lock = %s AND status = 'todo';

-- fleet_tasks --
-- status --cluster: one page of tasks in submission order, filtered on the server, with
-- the owner's host state (NULL: no owner, or an owner with no row). Parameters: the states
-- (NULL: all) twice, the host (owner, or pinned for a task no host owns; NULL: all) twice,
-- the task id to page after (NULL: from the first) twice, the row limit (NULL: no limit).
SELECT t.id, t.name, t.state, t.owner_host, h.state AS host_state, t.generation, t.queue,
    t.host, t.exit_code, t.failure_reason, t.verdict, t.retry_count, t.submitted_at,
    t.updated_at, t.error, t.restarted_from,
    round(extract(epoch FROM now() - t.updated_at)::numeric, 1)::float AS state_s
FROM supervise_tasks t LEFT JOIN supervise_hosts h ON h.host_id = t.owner_host
WHERE (%s::text[] IS NULL OR t.state = ANY(%s::text[]))
    AND (%s::text IS NULL OR coalesce(t.owner_host, t.host) = %s::text)
    AND (%s::text IS NULL OR (t.submitted_at, t.id) >
        (SELECT submitted_at, id FROM supervise_tasks WHERE id = %s::text))
ORDER BY t.submitted_at, t.id LIMIT %s;

-- fleet_task_counts --
-- status --cluster --snapshot's totals: tasks per state under the same filters as
-- fleet_tasks (no page). Parameters: the states twice, the host twice.
SELECT state, count(*) FROM supervise_tasks
WHERE (%s::text[] IS NULL OR state = ANY(%s::text[]))
    AND (%s::text IS NULL OR coalesce(owner_host, host) = %s::text)
GROUP BY state;

-- task_exists --
SELECT 1 FROM supervise_tasks WHERE id = %s;
-- ---------------------------------------------------------------- ops (retention.py, rights.py)

-- prune_batch --
-- One batch of supervise cluster prune (migration 0007's SECURITY DEFINER function), in the
-- caller's transaction. Parameters: seconds, the batch size. Counts removed: tasks, events,
-- controls, jobs, hosts.
SELECT tasks, events, controls, jobs, hosts FROM supervise_prune(%s, %s);

-- prune_plan --
-- What supervise cluster prune --dry-run would remove now (read only, every batch at once).
-- Parameters: the final states, seconds, seconds. Columns as prune_batch's.
WITH doomed AS (
    SELECT id FROM supervise_tasks
    WHERE state = ANY(%s) AND updated_at < now() - make_interval(secs => %s)
), cutoff AS (SELECT now() - make_interval(secs => %s) AS at)
SELECT (SELECT count(*) FROM doomed),
    (SELECT count(*) FROM supervise_events WHERE task_id IN (SELECT id FROM doomed)),
    (SELECT count(*) FROM supervise_controls WHERE task_id IN (SELECT id FROM doomed)),
    (SELECT count(*) FROM procrastinate_jobs WHERE args->>'task_id' IN (SELECT id FROM doomed)
        AND status IN ('succeeded', 'failed', 'cancelled', 'aborted')),
    (SELECT count(*) FROM supervise_hosts h, cutoff
     WHERE h.state <> 'alive' AND h.heartbeat_at < cutoff.at
        AND NOT EXISTS (SELECT 1 FROM supervise_tasks t
                        WHERE (t.owner_host = h.host_id OR t.host = h.host_id)
                            AND t.id NOT IN (SELECT id FROM doomed)));

-- role_missing --
-- What the login lacks of the rights a group role holds (directly or through the roles it
-- is a member of: supervise_operator is in supervise_submit): one row per object and
-- privilege, (rank, kind, object, privilege), tables first and functions last. Tables,
-- sequences and functions of the public schema, and column grants (UPDATE (done_at, ok,
-- result) on supervise_controls). Parameter: the group role's name.
WITH grantees AS (
    SELECT oid FROM pg_roles WHERE pg_has_role(%s, oid, 'MEMBER')
)
SELECT 1, 'table', c.relname, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v')
    AND a.grantee IN (SELECT oid FROM grantees)
    AND NOT has_table_privilege(c.oid, a.privilege_type)
UNION
SELECT 3, 'sequence', c.relname, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S'
    AND a.grantee IN (SELECT oid FROM grantees)
    AND NOT has_sequence_privilege(c.oid, a.privilege_type)
UNION
SELECT 4, 'function', p.oid::regprocedure::text, a.privilege_type
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.pronamespace = 'public'::regnamespace
    AND a.grantee IN (SELECT oid FROM grantees)
    AND NOT has_function_privilege(p.oid, a.privilege_type)
UNION
SELECT 2, 'column', c.relname || '.' || t.attname, a.privilege_type
FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid, aclexplode(t.attacl) a
WHERE c.relnamespace = 'public'::regnamespace
    AND a.grantee IN (SELECT oid FROM grantees)
    AND NOT has_column_privilege(c.oid, t.attnum, a.privilege_type)
ORDER BY 1, 3, 4;

-- role_exists --
SELECT to_regrole(%s) IS NOT NULL, current_user;

-- submitted_job --
-- submit --retry-for: the task id is taken; is it this submit's own row, stored by a try
-- whose answer was lost? Its job's id (0 once the job is gone). Parameters: id, spec.
SELECT coalesce((SELECT max(j.id) FROM procrastinate_jobs j WHERE j.queueing_lock = t.id), 0)
FROM supervise_tasks t WHERE t.id = %s AND t.spec = %s::jsonb;

-- ---------------------------------------------------------------- accounts (accountstore.py)

-- account_read --
-- One account's row and the database's time (epoch s): admission decides on the database's
-- clock, not the host's. Parameter: the account.
SELECT a.until, a.noted_by, a.last_start, extract(epoch FROM now())::double precision
FROM (SELECT 1) one LEFT JOIN supervise_accounts a ON a.account = %s;

-- account_note --
-- A run met the account's limit: the later of two resets wins (two hosts noting at once
-- serialize on the row), and a row that holds nothing (NaN, over 8 days = 691200 s ahead:
-- accounts.MAX_AHEAD) is replaced; last_start is kept (unless it too holds nothing). Parameters: account, until, task, host.
INSERT INTO supervise_accounts (account, until, noted_by, noted_host)
VALUES (%s, %s, %s, %s)
ON CONFLICT (account) DO UPDATE
    SET until = EXCLUDED.until, noted_by = EXCLUDED.noted_by,
        noted_host = EXCLUDED.noted_host, updated_at = now(),
        last_start = CASE WHEN supervise_accounts.last_start = 'NaN'
            OR supervise_accounts.last_start > extract(epoch FROM now()) + 691200
            THEN NULL ELSE supervise_accounts.last_start END
    WHERE supervise_accounts.until < EXCLUDED.until OR supervise_accounts.until = 'NaN'
        OR supervise_accounts.until > extract(epoch FROM now()) + 691200;

-- account_start --
-- Take the account's next staggered start after its reset, for the whole fleet: a row comes
-- back only when the reset is past and the last start is at least stagger seconds ago (by
-- the database's clock); two hosts at once: one gets it. Parameters: account, stagger.
UPDATE supervise_accounts SET last_start = extract(epoch FROM now()), updated_at = now()
WHERE account = %s AND until <= extract(epoch FROM now())
    AND (last_start IS NULL OR last_start = 'NaN'
         OR last_start <= extract(epoch FROM now()) - %s
         OR last_start > extract(epoch FROM now()) + 691200)
RETURNING last_start;

-- accounts_limited --
-- The accounts still limited, for status --cluster and hosts: account, until, noted_by,
-- noted_host, the database's time.
SELECT account, until, noted_by, noted_host, extract(epoch FROM now())::double precision
FROM supervise_accounts WHERE until > extract(epoch FROM now()) ORDER BY account LIMIT 100;
