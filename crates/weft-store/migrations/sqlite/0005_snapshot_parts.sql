-- weft schema 5 (SQLite): versioned snapshots, with the conversation in parts of its own.
--
-- A snapshot's head (the state without its conversation) records the version it was written at;
-- a head of another version is ignored and the log folded. Heads written before versions existed
-- read as version 0. The conversation, which only grows, is kept in parts: each snapshot adds the
-- messages since the last one, so no snapshot writes the whole conversation again.
ALTER TABLE snapshots ADD COLUMN v INTEGER NOT NULL DEFAULT 0;
CREATE TABLE snapshot_parts (
    session INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    start   INTEGER NOT NULL,
    part    TEXT    NOT NULL,
    PRIMARY KEY (session, start)
) WITHOUT ROWID;
