-- weft schema 4 (SQLite): every event records the lease epoch of the process that wrote it (0:
-- a writer that held no lease). Appends are fenced by it: see `lease::fence`.
ALTER TABLE events ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
