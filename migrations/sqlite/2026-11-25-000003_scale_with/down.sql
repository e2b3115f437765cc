ALTER TABLE units DROP COLUMN follows;
ALTER TABLE applications DROP COLUMN scale_with;
