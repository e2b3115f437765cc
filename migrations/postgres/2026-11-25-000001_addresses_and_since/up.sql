-- Where a machine is (the provider's addresses, preferred first,
-- comma-separated) and since when it has been in its state.
ALTER TABLE machines ADD COLUMN addresses TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN status_since_ms BIGINT;
