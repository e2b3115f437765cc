//! The tables, as diesel sees them. Both backends share this schema; see
//! `migrations/sqlite` and `migrations/postgres`.

diesel::table! {
    model (id) {
        id -> Integer,
        name -> Text,
        uuid -> Text,
        controller_uuid -> Text,
        constraints -> Text,
        config -> Text,
        next_machine -> BigInt,
        hourly_budget -> Nullable<Text>,
        zone_census_current -> Bool,
    }
}

diesel::table! {
    log_head (id) {
        id -> Integer,
        revision -> BigInt,
    }
}

diesel::table! {
    changes (revision) {
        revision -> BigInt,
        entity -> Text,
        entity_id -> Text,
        change -> Text,
        detail -> Text,
        origin -> Text,
        at_ms -> BigInt,
    }
}

diesel::table! {
    charms (url) {
        url -> Text,
        namespace -> Text,
        name -> Text,
        revision -> Integer,
        sha256 -> Text,
        metadata -> Text,
        config_schema -> Text,
    }
}

diesel::table! {
    applications (name) {
        name -> Text,
        charm_url -> Text,
        base -> Text,
        constraints -> Text,
        subordinate -> Bool,
        settings -> Text,
        life -> Text,
        next_unit -> BigInt,
        created_at_ms -> BigInt,
        scale_with -> Nullable<Text>,
        hourly_budget -> Nullable<Text>,
    }
}

diesel::table! {
    machines (id) {
        id -> Text,
        host_number -> BigInt,
        container_number -> Nullable<BigInt>,
        parent_id -> Nullable<Text>,
        container_type -> Nullable<Text>,
        base -> Text,
        constraints -> Text,
        placement -> Nullable<Text>,
        role -> Text,
        state -> Text,
        instance_id -> Nullable<Text>,
        instance_type -> Nullable<Text>,
        zone -> Nullable<Text>,
        hardware -> Nullable<Text>,
        status_message -> Text,
        attempts -> Integer,
        zones_failed -> Text,
        bootstrap_attempts -> Integer,
        stop_failures -> Integer,
        otp_hash -> Nullable<Text>,
        credential_hash -> Nullable<Text>,
        next_container -> BigInt,
        retry_at_ms -> Nullable<BigInt>,
        last_heartbeat_ms -> Nullable<BigInt>,
        created_at_ms -> BigInt,
        updated_at_ms -> BigInt,
        addresses -> Text,
        status_since_ms -> Nullable<BigInt>,
        lease_holder -> Nullable<Text>,
        lease_expires_ms -> Nullable<BigInt>,
        spread_kind -> Nullable<Text>,
        hourly_price -> Nullable<Text>,
        provisioning_rounds -> Integer,
    }
}

diesel::table! {
    units (name) {
        name -> Text,
        application -> Text,
        number -> BigInt,
        base -> Text,
        constraints -> Text,
        machine_id -> Nullable<Text>,
        principal -> Nullable<Text>,
        life -> Text,
        agent_status -> Text,
        workload_status -> Text,
        created_at_ms -> BigInt,
        follows -> Nullable<Text>,
    }
}

diesel::table! {
    relations (key) {
        key -> Text,
        app1 -> Text,
        endpoint1 -> Text,
        app2 -> Text,
        endpoint2 -> Text,
        interface -> Text,
        scope -> Text,
    }
}

diesel::table! {
    zones (name) {
        name -> Text,
        provider_available -> Bool,
        disabled -> Bool,
        reason -> Text,
    }
}

diesel::table! {
    credentials (name) {
        name -> Text,
        hash -> Text,
        created_at_ms -> BigInt,
    }
}

diesel::table! {
    leases (name) {
        name -> Text,
        holder -> Text,
        expires_ms -> BigInt,
    }
}

diesel::table! {
    model_secrets (name) {
        name -> Text,
        value -> Text,
        created_at_ms -> BigInt,
    }
}

diesel::table! {
    zone_census (kind, zone) {
        kind -> Text,
        zone -> Text,
        machines -> BigInt,
    }
}

diesel::joinable!(units -> applications (application));
diesel::joinable!(units -> machines (machine_id));
diesel::joinable!(applications -> charms (charm_url));

diesel::allow_tables_to_appear_in_same_query!(
    model,
    log_head,
    changes,
    charms,
    applications,
    machines,
    units,
    relations,
    zones,
);
