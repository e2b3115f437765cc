CREATE TABLE changes_beside_row_id (
    revision BIGINT PRIMARY KEY NOT NULL,
    entity TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    change TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT 'user',
    at_ms BIGINT NOT NULL
);
INSERT INTO changes_beside_row_id (revision, entity, entity_id, change, detail, origin, at_ms)
    SELECT revision, entity, entity_id, change, detail, origin, at_ms FROM changes ORDER BY revision;
DROP TABLE changes;
ALTER TABLE changes_beside_row_id RENAME TO changes;
