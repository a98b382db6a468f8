-- weft schema 6 (SQLite): long-term memory and document chunks ("knowledge"), searched with
-- FTS5. `owner` is the user id for scope 'user', the agent's name for 'agent', '' for 'public';
-- every search names the (scope, owner) pairs it may read.
CREATE TABLE knowledge (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    position INTEGER NOT NULL DEFAULT 0,
    text TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX knowledge_owner ON knowledge (kind, scope, owner, source);
CREATE VIRTUAL TABLE knowledge_fts USING fts5 (text, content = 'knowledge', content_rowid = 'id', tokenize = 'porter unicode61');
CREATE TRIGGER knowledge_ai AFTER INSERT ON knowledge BEGIN
    INSERT INTO knowledge_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER knowledge_ad AFTER DELETE ON knowledge BEGIN
    INSERT INTO knowledge_fts (knowledge_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
