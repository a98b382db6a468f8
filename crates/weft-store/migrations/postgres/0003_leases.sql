-- weft schema 3 (PostgreSQL): one owner per session. A lease names the process driving a
-- session and until when; each new owner gets the next epoch.
CREATE TABLE leases (
    session    TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    epoch      BIGINT NOT NULL,
    -- What another process asked of the owner (`cancel`, `pause`); cleared for each new owner.
    request    TEXT,
    expires_at BIGINT NOT NULL
);
