ALTER TABLE machines DROP COLUMN status_since_ms;
ALTER TABLE machines DROP COLUMN addresses;
