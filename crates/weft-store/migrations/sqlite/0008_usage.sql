-- weft schema 8 (SQLite): what each user spent per quota period (`day:2026-11-26`,
-- `month:2026-11`), added to after every model call; a new period is a new row.
CREATE TABLE usage_counters (
    user_id TEXT NOT NULL,
    period TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, period)
);
