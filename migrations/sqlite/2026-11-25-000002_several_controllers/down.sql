DROP TABLE zone_census;
ALTER TABLE machines DROP COLUMN spread_kind;
DROP TABLE model_secrets;
DROP TABLE leases;
DROP INDEX machines_lease_holder;
ALTER TABLE machines DROP COLUMN lease_expires_ms;
ALTER TABLE machines DROP COLUMN lease_holder;
