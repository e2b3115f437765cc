ALTER TABLE machines DROP COLUMN provisioning_rounds;
