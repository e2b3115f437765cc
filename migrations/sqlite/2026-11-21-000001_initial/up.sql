-- berth's state, SQLite edition. Keep in step with ../../postgres.
-- Times are milliseconds since the Unix epoch; constraints, bases,
-- placements and hardware are stored in their canonical text forms.

-- The one model this controller manages.
CREATE TABLE model (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL,
    uuid TEXT NOT NULL,
    controller_uuid TEXT NOT NULL,
    constraints TEXT NOT NULL DEFAULT '',
    config TEXT NOT NULL DEFAULT '{}',
    -- The number the next top-level machine gets; never reused.
    next_machine BIGINT NOT NULL DEFAULT 0
);

-- The change log's head. Writers bump it inside their transaction, so the
-- row lock orders concurrent commits and revisions have no gaps.
CREATE TABLE log_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL
);
INSERT INTO log_head (id, revision) VALUES (1, 0);

CREATE TABLE changes (
    revision BIGINT PRIMARY KEY NOT NULL,
    entity TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    change TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    -- Who made the change: user, engine, agent or provider.
    origin TEXT NOT NULL DEFAULT 'user',
    at_ms BIGINT NOT NULL
);

CREATE TABLE charms (
    url TEXT PRIMARY KEY NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    revision INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    metadata TEXT NOT NULL,
    config_schema TEXT NOT NULL
);

CREATE TABLE applications (
    name TEXT PRIMARY KEY NOT NULL,
    charm_url TEXT NOT NULL REFERENCES charms (url),
    base TEXT NOT NULL,
    constraints TEXT NOT NULL DEFAULT '',
    subordinate BOOLEAN NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}',
    life TEXT NOT NULL,
    next_unit BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE machines (
    id TEXT PRIMARY KEY NOT NULL,
    -- Numeric parts of the id, so that machines order as 2 < 10 < 10/lxd/0.
    host_number BIGINT NOT NULL,
    container_number BIGINT,
    parent_id TEXT REFERENCES machines (id),
    container_type TEXT,
    base TEXT NOT NULL,
    constraints TEXT NOT NULL DEFAULT '',
    placement TEXT,
    -- controller or workload (domain::machine::MachineRole).
    role TEXT NOT NULL,
    -- The lifecycle state (domain::machine::MachineState); life and the
    -- status words follow from it.
    state TEXT NOT NULL,
    instance_id TEXT,
    instance_type TEXT,
    zone TEXT,
    hardware TEXT,
    -- The last failure, in the provider's words.
    status_message TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    -- Zones that refused the machine this round, comma-separated.
    zones_failed TEXT NOT NULL DEFAULT '',
    bootstrap_attempts INTEGER NOT NULL DEFAULT 0,
    stop_failures INTEGER NOT NULL DEFAULT 0,
    otp_hash TEXT,
    credential_hash TEXT,
    next_container BIGINT NOT NULL DEFAULT 0,
    -- When a machine backing off after a transient failure may try again.
    retry_at_ms BIGINT,
    last_heartbeat_ms BIGINT,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX machines_by_state ON machines (state);
CREATE INDEX machines_by_instance ON machines (instance_id);
CREATE INDEX machines_by_parent ON machines (parent_id);

CREATE TABLE units (
    name TEXT PRIMARY KEY NOT NULL,
    application TEXT NOT NULL REFERENCES applications (name),
    number BIGINT NOT NULL,
    base TEXT NOT NULL,
    -- merge(model, application) at the moment the unit was created.
    constraints TEXT NOT NULL DEFAULT '',
    machine_id TEXT REFERENCES machines (id),
    principal TEXT REFERENCES units (name),
    life TEXT NOT NULL,
    agent_status TEXT NOT NULL,
    workload_status TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX units_by_machine ON units (machine_id);
CREATE INDEX units_by_application ON units (application);
CREATE INDEX units_by_principal ON units (principal);

CREATE TABLE relations (
    -- "a:endpoint b:endpoint", endpoints in name order.
    key TEXT PRIMARY KEY NOT NULL,
    app1 TEXT NOT NULL REFERENCES applications (name),
    endpoint1 TEXT NOT NULL,
    app2 TEXT NOT NULL REFERENCES applications (name),
    endpoint2 TEXT NOT NULL,
    interface TEXT NOT NULL,
    scope TEXT NOT NULL
);

CREATE TABLE zones (
    name TEXT PRIMARY KEY NOT NULL,
    -- What the provider reports.
    provider_available BOOLEAN NOT NULL,
    -- An administrator's disable-zone, which outlives provider refreshes.
    disabled BOOLEAN NOT NULL DEFAULT FALSE,
    reason TEXT NOT NULL DEFAULT ''
);

-- Hashes of the controller's own secrets (the admin token). Only hashes
-- are kept; the token itself is handed out once.
CREATE TABLE credentials (
    name TEXT PRIMARY KEY NOT NULL,
    hash TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
