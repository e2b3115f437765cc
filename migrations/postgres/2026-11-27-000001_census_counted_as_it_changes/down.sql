ALTER TABLE model DROP COLUMN zone_census_current;
