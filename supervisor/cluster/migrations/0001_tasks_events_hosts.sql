-- Version 1 (issue 15): one row per submitted task, each transition a host reported, one
-- row per host with its heartbeat and capacity.
CREATE TABLE supervise_tasks (
    id text PRIMARY KEY,
    name text NOT NULL,
    spec jsonb NOT NULL,
    host text,
    queue text NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    owner_host text,
    generation integer NOT NULL DEFAULT 0,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    session_id text,
    started_at text,
    finished_at text,
    exit_code integer,
    retry_count integer,
    failure_reason text,
    verdict text,
    error text
);
CREATE INDEX supervise_tasks_owner ON supervise_tasks (owner_host, state);
CREATE TABLE supervise_events (
    id bigserial PRIMARY KEY,
    transition_id text NOT NULL UNIQUE,
    task_id text NOT NULL,
    host_id text NOT NULL,
    generation integer NOT NULL,
    event text NOT NULL,
    state text,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX supervise_events_task ON supervise_events (task_id);
CREATE TABLE supervise_hosts (
    host_id text PRIMARY KEY,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz NOT NULL DEFAULT now(),
    capacity integer NOT NULL,
    running integer NOT NULL DEFAULT 0,
    version text,
    queues text[] NOT NULL DEFAULT '{}',
    last_error text
);
