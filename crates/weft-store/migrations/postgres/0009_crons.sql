-- weft schema 9 (PostgreSQL): crons, the schedules of `weft serve` (LangGraph's `/runs/crons`).
-- `next_run_at` is the tick a server claims next, with a compare-and-set on it; a claimed tick
-- stays in `claimed_tick` (with its claimer and how long the claim holds) until its run is
-- stored, so that a claim whose server died is taken up again rather than lost.
CREATE TABLE crons (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    assistant_id TEXT NOT NULL,
    thread_id TEXT,
    schedule TEXT NOT NULL,
    payload TEXT NOT NULL,
    metadata TEXT NOT NULL,
    on_run_completed TEXT,
    enabled BOOLEAN NOT NULL,
    end_time BIGINT,
    next_run_at BIGINT,
    claimed_tick BIGINT,
    claimed_by TEXT,
    claim_expires BIGINT,
    last_tick BIGINT,
    last_run_id TEXT,
    last_thread_id TEXT,
    last_error TEXT,
    ticks BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX crons_by_user ON crons (user_id, created_at);
CREATE INDEX crons_due ON crons (next_run_at) WHERE enabled;
