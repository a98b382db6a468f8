-- weft schema 12 (PostgreSQL): a session's events are deleted with it by a trigger instead of
-- a foreign key. The key checked every event row inserted against the session's row (a locking
-- read of it per row, a tenth of PostgreSQL's work in a worker's appends); every append already
-- inserts its events in the statement that moves the session's row on, only when that row is
-- there, so the check caught nothing. Deleting a session (or pruning many) still deletes its
-- events, in the same statement.
ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;

CREATE FUNCTION weft_delete_events_of_sessions() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM events WHERE session_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER sessions_delete_events
AFTER DELETE ON sessions
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION weft_delete_events_of_sessions();
