-- Version 8 (issue 26, part 3, the fleet): the accounts' usage limits, shared by every host
-- (supervisor/cluster/accountstore.py). One row per account (fingerprint acct- + 12 hex,
-- supervisor/accounts.py): until (epoch seconds the API named as the reset), who noted it
-- (host and task), and last_start (epoch seconds, database time, of the latest start
-- admitted after the reset: the stagger is taken across the fleet with one UPDATE).
-- Times are plain numbers as in state_dir/accounts.json; a row another login wrote (NaN,
-- Infinity, a reset years ahead) is read and skipped by the believable_entry rule.
CREATE TABLE supervise_accounts (
    account text PRIMARY KEY,
    until double precision NOT NULL,
    noted_by text NOT NULL,
    noted_host text NOT NULL,
    last_start double precision,
    updated_at timestamptz NOT NULL DEFAULT now()
);
