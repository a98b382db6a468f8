-- weft schema 4 (PostgreSQL): every event records the lease epoch of the process that wrote it
-- (0: a writer that held no lease). Appends are fenced by it: see `lease::fence`.
ALTER TABLE events ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
