-- weft schema 7 (SQLite): an entry's embedding (little-endian float32, length 1) and the model
-- that made it; vectors of different models are never compared.
ALTER TABLE knowledge ADD COLUMN embedding BLOB;
ALTER TABLE knowledge ADD COLUMN embedding_model TEXT;
