-- Version 5 (issue 25, conn): each host reports with its heartbeat how many connections it
-- holds to this database (its pool and its LISTEN connection), for 'supervise hosts'.
ALTER TABLE supervise_hosts ADD COLUMN connections integer;
