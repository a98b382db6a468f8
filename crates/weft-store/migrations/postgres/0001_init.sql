-- weft schema 1 (PostgreSQL): sessions, their event logs, and state snapshots.
CREATE TABLE sessions (
    id           TEXT    NOT NULL PRIMARY KEY,
    user_id      TEXT,
    agent        TEXT    NOT NULL,
    reference_id TEXT,
    metadata     JSONB   NOT NULL DEFAULT 'null',
    parent_id    TEXT,
    status       TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL,
    last_seq     BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC);
CREATE INDEX sessions_by_user ON sessions (user_id, updated_at DESC, id DESC);
CREATE INDEX sessions_by_status ON sessions (status, updated_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (parent_id);

CREATE TABLE events (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT  NOT NULL,
    ts         BIGINT  NOT NULL,
    v          INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    payload    JSONB   NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE snapshots (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT  NOT NULL,
    state      JSONB   NOT NULL,
    PRIMARY KEY (session_id, seq)
);
