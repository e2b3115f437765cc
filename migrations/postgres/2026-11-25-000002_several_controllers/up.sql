-- Several controllers on one store.
--
-- The provisioning lock: a controller works on a machine only while it
-- holds the machine's lease (its holder and when the lease runs out).
ALTER TABLE machines ADD COLUMN lease_holder TEXT;
ALTER TABLE machines ADD COLUMN lease_expires_ms BIGINT;
CREATE INDEX machines_lease_holder ON machines (lease_holder);
-- Cluster-wide jobs (reconciliation with the cloud, the stray sweep, the
-- heartbeat watch) run under one lease each.
CREATE TABLE leases (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    expires_ms BIGINT NOT NULL
);
-- The model's secrets, made by the first controller and used by the rest.
CREATE TABLE model_secrets (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
-- The zone census: how many machines of each kind (role and applications,
-- `workload:mysql,wordpress`) each zone holds, counted when a machine's
-- zone is chosen and let go when it loses it, so that controllers placing
-- at once spread as one. A machine counted remembers its kind.
ALTER TABLE machines ADD COLUMN spread_kind TEXT;
CREATE TABLE zone_census (
    kind TEXT NOT NULL,
    zone TEXT NOT NULL,
    machines BIGINT NOT NULL,
    PRIMARY KEY (kind, zone)
);
