-- weft schema 8 (PostgreSQL): what each user spent per quota period (`day:2026-11-26`,
-- `month:2026-11`), added to after every model call; a new period is a new row.
CREATE TABLE usage_counters (
    user_id TEXT NOT NULL,
    period TEXT NOT NULL,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    model_calls BIGINT NOT NULL DEFAULT 0,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, period)
);
