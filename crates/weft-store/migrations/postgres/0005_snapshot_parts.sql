-- weft schema 5 (PostgreSQL): versioned snapshots, with the conversation in parts of its own.
--
-- A snapshot's head (the state without its conversation) records the version it was written at;
-- a head of another version is ignored and the log folded. Heads written before versions existed
-- read as version 0. The conversation, which only grows, is kept in parts: each snapshot adds the
-- messages since the last one, so no snapshot writes the whole conversation again. Heads and
-- parts are text (weft writes them as JSON and never queries inside them: checking them as `json`
-- on every write would cost without protecting anything).
ALTER TABLE snapshots ADD COLUMN v INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ALTER COLUMN state TYPE TEXT USING state::text;
CREATE TABLE snapshot_parts (
    session_id TEXT   NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    start      BIGINT NOT NULL,
    part       TEXT   NOT NULL,
    PRIMARY KEY (session_id, start)
);
