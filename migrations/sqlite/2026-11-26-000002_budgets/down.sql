ALTER TABLE applications DROP COLUMN hourly_budget;
ALTER TABLE model DROP COLUMN hourly_budget;
