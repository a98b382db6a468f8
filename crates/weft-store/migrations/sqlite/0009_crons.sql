-- weft schema 9 (SQLite): crons, the schedules of `weft serve` (LangGraph's `/runs/crons`).
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
    enabled INTEGER NOT NULL,
    end_time INTEGER,
    next_run_at INTEGER,
    claimed_tick INTEGER,
    claimed_by TEXT,
    claim_expires INTEGER,
    last_tick INTEGER,
    last_run_id TEXT,
    last_thread_id TEXT,
    last_error TEXT,
    ticks INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX crons_by_user ON crons (user_id, created_at);
CREATE INDEX crons_due ON crons (next_run_at) WHERE enabled = 1;
