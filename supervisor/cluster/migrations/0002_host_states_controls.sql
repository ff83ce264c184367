-- Version 2 (issue 15): the hosts' states and their own host_timeout and on_host_lost, the
-- runs a task had on lost hosts, and operator requests routed to a task's host.
ALTER TABLE supervise_hosts ADD COLUMN state text NOT NULL DEFAULT 'alive';
ALTER TABLE supervise_hosts ADD COLUMN stopped_at timestamptz;
ALTER TABLE supervise_hosts ADD COLUMN lost_at timestamptz;
ALTER TABLE supervise_hosts ADD COLUMN host_timeout double precision NOT NULL
    DEFAULT 30;
ALTER TABLE supervise_hosts ADD COLUMN on_host_lost text NOT NULL DEFAULT 'report';
ALTER TABLE supervise_tasks ADD COLUMN restarted_from jsonb NOT NULL DEFAULT '[]';
CREATE TABLE supervise_controls (
    id bigserial PRIMARY KEY,
    task_id text NOT NULL,
    host_id text NOT NULL,
    verb text NOT NULL,
    requested_by text,
    requested_at timestamptz NOT NULL DEFAULT now(),
    done_at timestamptz,
    ok boolean,
    result text
);
CREATE INDEX supervise_controls_pending ON supervise_controls (host_id)
    WHERE done_at IS NULL;
