-- weft schema 2 (SQLite): sessions get an integer key, and events are stored in the order they
-- were appended (a rowid table), found by session through a unique (session, seq) index.
--
-- Appends then write at the end of one table and into a compact index, instead of into every
-- session's own region of a table keyed by a 36-character id. A session's last sequence number
-- is read from its log (`last_seq` is gone from the row), and an append rewrites the session row
-- only when its status changes or its `updated_at` is a second old or more.
CREATE TABLE sessions_v2 (
    pk           INTEGER PRIMARY KEY,
    id           TEXT    NOT NULL UNIQUE,
    user_id      TEXT,
    agent        TEXT    NOT NULL,
    reference_id TEXT,
    metadata     TEXT    NOT NULL DEFAULT 'null',
    parent_id    TEXT,
    status       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
INSERT INTO sessions_v2 (id, user_id, agent, reference_id, metadata, parent_id, status, created_at, updated_at)
    SELECT id, user_id, agent, reference_id, metadata, parent_id, status, created_at, updated_at
    FROM sessions ORDER BY created_at, id;

CREATE TABLE events_v2 (
    n       INTEGER PRIMARY KEY,
    session INTEGER NOT NULL REFERENCES sessions_v2 (pk) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    ts      INTEGER NOT NULL,
    v       INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    payload TEXT    NOT NULL
);
INSERT INTO events_v2 (session, seq, ts, v, type, payload)
    SELECT s.pk, e.seq, e.ts, e.v, e.type, e.payload
    FROM events e JOIN sessions_v2 s ON s.id = e.session_id
    ORDER BY e.ts, s.pk, e.seq;

CREATE TABLE snapshots_v2 (
    session INTEGER NOT NULL REFERENCES sessions_v2 (pk) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    state   TEXT    NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
INSERT INTO snapshots_v2 (session, seq, state)
    SELECT s.pk, p.seq, p.state
    FROM snapshots p JOIN sessions_v2 s ON s.id = p.session_id;

DROP TABLE snapshots;
DROP TABLE events;
DROP TABLE sessions;
-- Renaming a parent table rewrites the references of its children.
ALTER TABLE sessions_v2 RENAME TO sessions;
ALTER TABLE events_v2 RENAME TO events;
ALTER TABLE snapshots_v2 RENAME TO snapshots;

CREATE UNIQUE INDEX events_by_session ON events (session, seq);
CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC);
CREATE INDEX sessions_by_user ON sessions (user_id, updated_at DESC, id DESC);
CREATE INDEX sessions_by_status ON sessions (status, updated_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (parent_id);
