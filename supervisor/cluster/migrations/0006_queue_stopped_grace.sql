-- Version 6 (issue 25): how long a cleanly stopped host may keep its tasks before the
-- sweeper applies its on_host_lost to them ([cluster] stopped_host_grace, seconds, written
-- in every heartbeat; NULL, as a host of an earlier version leaves it: for ever, as
-- before), and the index status --cluster pages on (submission order, a keyset).
ALTER TABLE supervise_hosts ADD COLUMN stopped_host_grace double precision;
CREATE INDEX supervise_tasks_submitted ON supervise_tasks (submitted_at, id);
