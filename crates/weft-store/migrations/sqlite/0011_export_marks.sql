-- weft schema 11 (SQLite): how far a session's spans were acknowledged by the OTLP collector
-- (the spans closed by its events up to this sequence number); a process that drives the
-- session later exports the spans closed after it.
ALTER TABLE sessions ADD COLUMN exported_seq INTEGER NOT NULL DEFAULT 0;
