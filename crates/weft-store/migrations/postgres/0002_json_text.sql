-- weft schema 2 (PostgreSQL): event payloads, session metadata and snapshots are kept as `json`
-- (the text as written, checked to be JSON) instead of `jsonb`, which cannot hold a NUL
-- character (`\u0000`): text from tools and models may carry one, and an append must not fail
-- because of it. weft never queries inside these values.
ALTER TABLE sessions ALTER COLUMN metadata DROP DEFAULT;
ALTER TABLE sessions ALTER COLUMN metadata TYPE JSON USING metadata::json;
ALTER TABLE sessions ALTER COLUMN metadata SET DEFAULT 'null';
ALTER TABLE events ALTER COLUMN payload TYPE JSON USING payload::json;
ALTER TABLE snapshots ALTER COLUMN state TYPE JSON USING state::json;
