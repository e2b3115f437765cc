-- How many times retry-provisioning began each machine's provisioning
-- again: part of its launches' client tokens, so that a new round's
-- tokens differ from the last round's.
ALTER TABLE machines ADD COLUMN provisioning_rounds INTEGER NOT NULL DEFAULT 0;
