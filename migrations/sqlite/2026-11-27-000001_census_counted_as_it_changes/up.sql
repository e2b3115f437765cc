-- Whether the zone census counts every machine by the kind its units make
-- now. A store written before units joining and leaving machines were
-- counted as they happen says no, and is counted afresh once at start.
ALTER TABLE model ADD COLUMN zone_census_current BOOLEAN NOT NULL DEFAULT FALSE;
