-- weft schema 1 (SQLite): sessions, their event logs, and state snapshots.
CREATE TABLE sessions (
    id           TEXT    NOT NULL PRIMARY KEY,
    user_id      TEXT,
    agent        TEXT    NOT NULL,
    reference_id TEXT,
    metadata     TEXT    NOT NULL DEFAULT 'null',
    parent_id    TEXT,
    status       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    last_seq     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC);
CREATE INDEX sessions_by_user ON sessions (user_id, updated_at DESC, id DESC);
CREATE INDEX sessions_by_status ON sessions (status, updated_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (parent_id);

CREATE TABLE events (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    ts         INTEGER NOT NULL,
    v          INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE snapshots (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
