-- weft schema 6 (PostgreSQL): long-term memory and document chunks ("knowledge"), searched
-- with PostgreSQL's full-text search. `owner` is the user id for scope 'user', the agent's name
-- for 'agent', '' for 'public'; every search names the (scope, owner) pairs it may read.
CREATE TABLE knowledge (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    position BIGINT NOT NULL DEFAULT 0,
    text TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX knowledge_owner ON knowledge (kind, scope, owner, source);
CREATE INDEX knowledge_tsv ON knowledge USING GIN (tsv);
