-- supervise: the fleet's three group roles (issue 15, "Trust"). Run as the database's owner
-- or a superuser, after `supervise cluster init`, and again after each init that added
-- tables (re-runnable). `supervise cluster roles` prints this file; `--apply` runs it.
--
-- TRUST MODEL: whoever can INSERT into supervise_tasks can run agents (a prompt, a
-- project_dir) on every host of the fleet. Grant supervise_submit only to people and
-- programs you would let run code on all of those machines.
--
-- Both are NOLOGIN group roles; an admin grants them to login roles, e.g.
--   CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE supervise_submit;
--   GRANT supervise_engine TO host_build1;
--   GRANT supervise_operator TO carol;
--
-- supervise_submit: `supervise submit`, `status --cluster`, `hosts`: read everything,
--   INSERT a task, defer its procrastinate job. A defer is procrastinate's
--   procrastinate_defer_jobs_v1() (SECURITY INVOKER: it runs with the caller's rights),
--   which INSERTs into procrastinate_jobs (RETURNING id: SELECT), whose triggers INSERT
--   into procrastinate_events and call pg_notify (procrastinate 3.10 sql/schema.sql).
--   No UPDATE or DELETE of tasks, no writes to hosts, events or controls.
-- supervise_operator: supervise_submit, plus `stop`/`resume`/`approve`/`deny` of a task on
--   another host: INSERT a control request, and close one its host did not answer in time
--   (UPDATE of done_at, ok, result only). No writes to tasks, events or hosts.
-- supervise_engine: `supervise run` with [cluster]: claim and update tasks, write events,
--   heartbeats and control answers, and everything procrastinate's worker does (fetch,
--   finish, retry and delete jobs, register and heartbeat workers, periodic defers), and
--   the periodic prune of ended tasks (supervise_prune, schema v7: a SECURITY DEFINER
--   function that removes only rows in a final state; no DELETE on any table of ours).

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'supervise_submit') THEN
        CREATE ROLE supervise_submit NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'supervise_engine') THEN
        CREATE ROLE supervise_engine NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'supervise_operator') THEN
        CREATE ROLE supervise_operator NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO supervise_submit, supervise_engine;

-- Reading: both roles read every table of ours and of procrastinate.
DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public'
             AND (tablename LIKE 'supervise\_%' OR tablename LIKE 'procrastinate\_%')
    LOOP
        EXECUTE format('GRANT SELECT ON public.%I TO supervise_submit, supervise_engine', t);
    END LOOP;
END
$$;

-- supervise_submit: one task row and its job.
GRANT INSERT ON supervise_tasks TO supervise_submit;
GRANT INSERT ON procrastinate_jobs, procrastinate_events TO supervise_submit;
GRANT USAGE ON SEQUENCE procrastinate_jobs_id_seq, procrastinate_events_id_seq
    TO supervise_submit;
GRANT EXECUTE ON FUNCTION procrastinate_defer_jobs_v1(procrastinate_job_to_defer_v1[])
    TO supervise_submit;

-- supervise_operator: what supervise_submit may, and control requests.
GRANT supervise_submit TO supervise_operator;
GRANT INSERT ON supervise_controls TO supervise_operator;
GRANT UPDATE (done_at, ok, result) ON supervise_controls TO supervise_operator;
GRANT USAGE ON SEQUENCE supervise_controls_id_seq TO supervise_operator;
-- `stop` of a task no host has claimed: a SECURITY DEFINER function that touches only a
-- `queued` row and its waiting job (schema v3).
GRANT EXECUTE ON FUNCTION supervise_cancel_queued(text, text) TO supervise_operator;

-- supervise_engine: rows of tasks, events, hosts and controls (no DELETE of tasks), and
-- procrastinate's tables, sequences and functions in full.
GRANT INSERT, UPDATE ON supervise_tasks, supervise_events, supervise_hosts,
    supervise_controls TO supervise_engine;
-- The accounts' usage limits shared by the fleet (schema v8, issue 26): note a limit, take
-- a staggered start. No DELETE: a row past its reset holds nothing.
GRANT INSERT, UPDATE ON supervise_accounts TO supervise_engine;
DO $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'public'
             AND tablename LIKE 'procrastinate\_%'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON public.%I TO supervise_engine', t);
    END LOOP;
    FOR t IN SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'
             AND (sequencename LIKE 'procrastinate\_%' OR sequencename LIKE 'supervise\_%')
    LOOP
        EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE public.%I TO supervise_engine', t);
    END LOOP;
    FOR t IN SELECT p.oid::regprocedure::text FROM pg_proc p
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'public' AND p.proname LIKE 'procrastinate\_%'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO supervise_engine', t);
    END LOOP;
END
$$;
-- The periodic prune ([cluster] prune_after) and 'supervise cluster prune' (schema v7).
GRANT EXECUTE ON FUNCTION supervise_prune(double precision, integer) TO supervise_engine;
