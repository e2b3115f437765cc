-- Co-location that follows: an application deployed with
-- `--to scale-with=<leader>` keeps a unit beside every unit of the leader.
-- The application names its leader; each of its units names the leader's
-- unit it follows, so that removing that unit removes it too.
ALTER TABLE applications ADD COLUMN scale_with TEXT;
ALTER TABLE units ADD COLUMN follows TEXT;
