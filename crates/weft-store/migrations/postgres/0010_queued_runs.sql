-- weft schema 10 (PostgreSQL): runs queued behind another run of their thread
-- (`multitask_strategy: enqueue`), stored before the client is answered and deleted once the
-- run's marker is in the thread's log. `owner` starts the run once the thread is free and
-- renews `expires_at` while it waits; another process takes over a claim that expired.
CREATE TABLE queued_runs (
    run_id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    body TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX queued_runs_by_thread ON queued_runs (thread_id, created_at);
CREATE INDEX queued_runs_by_expiry ON queued_runs (expires_at);
CREATE INDEX queued_runs_by_owner ON queued_runs (owner);
