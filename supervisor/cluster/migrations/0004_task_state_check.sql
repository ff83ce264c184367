-- Version 4 (issue 23): a task's state is one of the fleet's states (FleetState in
-- supervisor/taskdir/states.py; tests/test_cluster_sql.py checks that the two lists agree).
-- Every value the code before it wrote is in the list, so a fleet database of version 3
-- takes it without change; a new state needs a migration that replaces the constraint.
ALTER TABLE supervise_tasks ADD CONSTRAINT supervise_tasks_state_check CHECK (state IN (
    'queued', 'claimed', 'running', 'crashed', 'hung', 'waiting', 'escalated', 'verifying',
    'completed', 'failed', 'abandoned', 'superseded', 'rejected', 'host_lost'
));
