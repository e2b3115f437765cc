-- The change log keyed by its revision itself. Declared `BIGINT PRIMARY
-- KEY`, the revision was a column beside SQLite's own row id, with an index
-- of its own: every change written went into two trees, and every read by
-- revision went through the index to the table. As `INTEGER PRIMARY KEY`
-- the revision is the row id (64 bits, as before): one tree, read in order.
CREATE TABLE changes_by_revision (
    revision INTEGER PRIMARY KEY NOT NULL,
    entity TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    change TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    -- Who made the change: user, engine, agent or provider.
    origin TEXT NOT NULL DEFAULT 'user',
    at_ms BIGINT NOT NULL
);
INSERT INTO changes_by_revision (revision, entity, entity_id, change, detail, origin, at_ms)
    SELECT revision, entity, entity_id, change, detail, origin, at_ms FROM changes ORDER BY revision;
DROP TABLE changes;
ALTER TABLE changes_by_revision RENAME TO changes;
