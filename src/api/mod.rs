//! berth's HTTP API: the JSON routes under `/v1` that the command line and
//! other clients use, the provider webhooks, the machine agents' check-in,
//! `/healthz`, `/metrics`, the OpenAPI document describing them all, and
//! the dashboard page at `/` that calls them.
//!
//! Requests are parsed at this edge into domain types (constraints, bases,
//! placement, names) and handed to the [`Store`]; the provisioning engine
//! learns of them from the store's change log. The API reaches the engine
//! only through [`ControllerLink`] (for provider webhooks) and
//! [`Metrics`] (which the engine updates and `/metrics` renders).
//!
//! - [`errors`]: the JSON error body and the status each error maps to.
//! - [`auth`]: the admin token, and the concurrency guard.
//! - [`applications`], [`machines`], [`model`], [`relations`], [`zones`]:
//!   the user's operations.
//! - [`observe`]: status (served from [`crate::status`]'s cache), the
//!   event stream, healthz, metrics (machine counts from the same cache),
//!   OpenAPI.
//! - [`feed`]: the change log's tail, read once for every event stream.
//! - [`webhooks`], [`agents`]: what providers and machine agents call.
//! - [`plans`]: dry runs, `if_revision` and budgets for every command that
//!   starts or removes machines; explanations.
//! - [`sim`]: the simulated cloud's faults, set by an administrator.
//! - [`openapi`]: the OpenAPI 3 document.
//! - [`dashboard`]: the page at `/`, built into the binary.

pub mod agents;
pub mod applications;
pub mod auth;
pub mod charms;
pub mod dashboard;
pub mod errors;
pub mod feed;
pub mod input;
pub mod machines;
pub mod model;
pub mod observe;
pub mod openapi;
pub mod plans;
pub mod relations;
pub mod sim;
pub mod socket;
pub mod webhooks;
pub mod zones;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{web, App, FromRequest, Handler, HttpServer, Resource, Responder, Route};
use tokio::sync::Semaphore;

use crate::api::feed::ChangeFeed;
use crate::contracts::provider::{ControllerLink, Provider};
use crate::contracts::secrets::Secret;
use crate::domain::constraints::Key;
use crate::domain::instance_types::HourlyPrice;
use crate::domain::placement::PlacementSupport;
use crate::metrics::Metrics;
use crate::providers::sim::SimProvider;
use crate::status::cache::{self, StatusCache};
use crate::store::Store;

/// The largest request body accepted, JSON or webhook: far more than any
/// request needs (a deploy with a large config), small enough that a
/// client cannot make the controller buffer much. Larger bodies get 413.
pub const BODY_LIMIT_BYTES: usize = 256 * 1024;

/// How many requests are handled at once before new ones get 503. Writes
/// are serialised by the store's writer and reads share
/// [`crate::store::READ_POOL_SIZE`] connections, so more in flight only
/// means longer waits; refusing early lets clients back off.
pub const MAX_CONCURRENT_REQUESTS: usize = 256;

/// How many event streams may be open at once unless `[api]
/// max_event_streams` says otherwise. Streams share one reader of the
/// change log ([`feed`]), so what each costs is its connection: a file
/// descriptor and some kilobytes of buffers (measured in RELIABILITY.md).
/// The server lowers the limit to what its file-descriptor limit allows.
pub const MAX_EVENT_STREAMS: usize = 10_000;

/// How often an idle event stream sends a comment, so proxies and clients
/// can tell a quiet stream from a dead one.
pub const EVENT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a stopping server waits for requests in flight. Event streams
/// never end by themselves, so without a bound a graceful stop would wait
/// for every watcher to hang up.
pub const SHUTDOWN_TIMEOUT_SECS: u64 = 10;

/// The most units or machines one request may add: enough for any real
/// deployment step, and a bound on the size of one store transaction.
pub const MAX_COUNT_PER_REQUEST: u32 = 1000;

/// The API's limits; [`Limits::default`] uses the named constants above.
/// Tests lower them to reach them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub body_bytes: usize,
    pub max_concurrent_requests: usize,
    pub max_event_streams: usize,
    pub event_keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: BODY_LIMIT_BYTES,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
            max_event_streams: MAX_EVENT_STREAMS,
            event_keep_alive: EVENT_KEEP_ALIVE,
        }
    }
}

/// What the API needs to know about the active provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderInfo {
    /// `sim`, `ec2`, ...: shown as the model's cloud, and in warnings.
    pub name: String,
    /// The constraint keys the provider honours; others set on deploy or
    /// set-constraints are kept and answered with a warning.
    pub supported_constraints: Vec<Key>,
    /// Whether the provider can start lxd containers; `lxd` placements are
    /// refused on one that cannot.
    pub supports_containers: bool,
    /// Why `ssh:` placements are refused (their agents would be told an
    /// address of the controller that no host can reach); `None` when
    /// hosts can be enlisted.
    pub ssh_refused: Option<String>,
}

impl ProviderInfo {
    /// What `provider` honours, with agents told to reach the controller
    /// at `controller_url`: `ssh:` hosts are refused up front while no
    /// host could reach it there.
    pub fn of(
        provider: &dyn crate::contracts::provider::Provider,
        controller_url: &str,
    ) -> ProviderInfo {
        ProviderInfo {
            name: provider.name().to_string(),
            supported_constraints: provider.supported_constraints().to_vec(),
            supports_containers: provider.supports_containers(),
            ssh_refused: crate::providers::manual::check_controller_url(controller_url, "the host")
                .err()
                .map(|refused| refused.message),
        }
    }

    /// What the provider can carry out of the placement directives.
    pub fn placement_support(&self) -> PlacementSupport<'_> {
        PlacementSupport {
            provider: &self.name,
            containers: self.supports_containers,
            ssh_refused: self.ssh_refused.as_deref(),
        }
    }
}

/// Where plans and explanations get their prices: the cloud's catalogue
/// and zone offers, and the price ceiling the engine launches under.
#[derive(Clone)]
pub struct PricingSource {
    pub provider: Arc<dyn Provider>,
    pub price_ceiling: HourlyPrice,
}

/// Everything the API is given when it starts.
#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    /// Where provider webhooks are forwarded (the engine).
    pub link: Arc<dyn ControllerLink>,
    pub provider: ProviderInfo,
    /// Shared with the engine, which updates it; rendered by `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The key webhook senders sign with; without it, webhooks are refused
    /// with 503 (the controller is not set up to receive them).
    pub webhook_secret: Option<Secret>,
    pub limits: Limits,
    /// The simulated cloud, when it is the provider: its faults are set
    /// through `/v1/sim/faults`.
    pub sim: Option<Arc<SimProvider>>,
    /// The cloud's prices, for plans, explanations and budgets; without
    /// them those requests are refused.
    pub pricing: Option<PricingSource>,
}

/// What every worker shares: the state, plus what the server derives from
/// it once at start.
pub struct Shared {
    pub state: ApiState,
    /// The admin token's hash, read from the store once at start so that
    /// authenticating a request costs no database read. A token rotated
    /// while the server runs takes effect at the next start.
    pub admin_token_hash: String,
    /// One permit per request in flight ([`auth::limit_concurrency`]).
    pub requests: Arc<Semaphore>,
    /// One permit per open event stream.
    pub event_streams: Arc<Semaphore>,
    /// The change log's tail, which every event stream reads.
    pub feed: ChangeFeed,
    /// Webhook signatures seen recently, to refuse replays.
    pub replays: webhooks::ReplayCache,
    /// The OpenAPI document, rendered once.
    pub openapi_json: String,
    /// The methods each documented path answers, by path as the document
    /// writes it (`/v1/machines/{id}`), for 405's `Allow` header.
    pub allowed_methods: std::collections::HashMap<String, String>,
    /// The status document, kept up to date, and its latest rendering.
    pub status: StatusCache,
}

/// Where the status cache, the store it reads and the cloud it names are.
fn status_parts(shared: &Shared) -> cache::Fresh<'_> {
    cache::Fresh {
        cache: &shared.status,
        store: &shared.state.store,
        cloud: &shared.state.provider.name,
    }
}

/// Where the feed and the store it follows are.
fn feed_parts(shared: &Shared) -> feed::Following<'_> {
    feed::Following {
        feed: &shared.feed,
        store: &shared.state.store,
    }
}

/// A resource whose unsupported methods get a JSON 405.
fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(errors::method_not_allowed))
}

/// The routes under `/v1` that take the admin token (relative to `/v1`).
fn admin_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/status").get(observe::get_status))
        .service(resource("/openapi.json").get(observe::get_openapi))
        .service(resource("/events").get(observe::get_events))
        .service(resource("/charms").route(write(web::post(), charms::add_charm)))
        .service(resource("/applications").route(write(web::post(), applications::deploy)))
        .service(
            resource("/applications/{app}")
                .route(write(web::delete(), applications::remove_application)),
        )
        .service(
            resource("/applications/{app}/units")
                .route(write(web::post(), applications::add_units)),
        )
        .service(
            resource("/applications/{app}/constraints")
                .get(applications::get_constraints)
                .route(write(web::put(), applications::set_constraints)),
        )
        .service(resource("/units/remove").route(write(web::post(), applications::remove_units)))
        .service(
            resource("/model/constraints")
                .get(model::get_constraints)
                .route(write(web::put(), model::set_constraints)),
        )
        .service(resource("/machines").route(write(web::post(), machines::add_machines)))
        .service(resource("/machines/retry").route(write(web::post(), machines::retry)))
        .service(resource("/machines/{id:.+}/explanation").get(plans::explain_machine))
        .service(
            resource("/budgets")
                .get(plans::get_budgets)
                .route(write(web::put(), plans::set_budget)),
        )
        // Machine ids hold slashes (`0/lxd/1`): the id is the whole tail.
        .service(
            resource("/machines/{id:.+}").route(write(web::delete(), machines::remove_machine)),
        )
        .service(resource("/relations").route(write(web::post(), relations::integrate)))
        .service(
            resource("/relations/remove").route(write(web::post(), relations::remove_relation)),
        )
        .service(resource("/zones").get(zones::list))
        .service(resource("/zones/{zone}/enable").route(write(web::post(), zones::enable)))
        .service(resource("/zones/{zone}/disable").route(write(web::post(), zones::disable)))
        .service(
            resource("/sim/faults")
                .get(sim::get_faults)
                .route(write(web::put(), sim::set_faults))
                .route(bare(web::delete(), sim::clear_faults)),
        );
}

/// A write route of `method` (`web::post()`, `put()`, `delete()`) to
/// `handler` that refuses options sent where it does not read them
/// ([`errors::refuse_misplaced_options`]). The check runs once the method
/// has matched, so that a method the path does not take is still answered
/// 405.
fn write<F, Args>(method: Route, handler: F) -> Route
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    method
        .to(handler)
        .wrap(from_fn(errors::refuse_misplaced_options))
}

/// As [`write`], for a route that takes no options at all: a query string
/// or a body is refused ([`errors::refuse_any_options`]).
fn bare<F, Args>(method: Route, handler: F) -> Route
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    method.to(handler).wrap(from_fn(errors::refuse_any_options))
}

/// The dashboard's page, script and style: no token (they hold no
/// secret) and outside the concurrency limit, as `/healthz` is.
pub fn dashboard_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/").get(dashboard::index))
        .service(resource(dashboard::SCRIPT_PATH).get(dashboard::script))
        .service(resource(dashboard::STYLE_PATH).get(dashboard::style));
}

/// Builds the shared state: reads the admin token's hash and renders the
/// OpenAPI document.
///
/// # Errors
///
/// When the store has no admin token (call
/// [`Store::ensure_admin_token`] first) or cannot be read.
fn shared(state: ApiState, status: StatusCache) -> std::io::Result<Shared> {
    let admin_token_hash = state
        .store
        .admin_token_hash()
        .map_err(|e| std::io::Error::other(format!("cannot read the admin token: {e}")))?;
    let document = openapi::document();
    let allowed_methods = openapi::allowed_methods(&document);
    let openapi_json = openapi::served_json()
        .map_err(|e| std::io::Error::other(format!("cannot render the OpenAPI document: {e}")))?;
    Ok(Shared {
        allowed_methods,
        admin_token_hash,
        requests: Arc::new(Semaphore::new(state.limits.max_concurrent_requests)),
        event_streams: Arc::new(Semaphore::new(state.limits.max_event_streams)),
        feed: ChangeFeed::new(state.store.revision()),
        replays: webhooks::ReplayCache::default(),
        openapi_json,
        status,
        state,
    })
}

/// Starts the API on `listener` (bind port 0 in tests and read the port
/// back from the listener). The returned server runs once awaited or
/// spawned; its handle stops it.
///
/// # Errors
///
/// When the store has no admin token yet ([`Store::ensure_admin_token`]
/// makes one), or the listener cannot be used.
pub fn server(listener: TcpListener, state: ApiState) -> std::io::Result<Server> {
    server_with_status(listener, state, StatusCache::default(), None)
}

/// Like [`server`], with a status cache prepared beforehand
/// ([`StatusCache::prepared`]) so that the first status
/// request is answered without reading the whole state, served over TLS
/// when `tls` is given.
///
/// # Errors
///
/// As [`server`].
pub fn server_with_status(
    listener: TcpListener,
    state: ApiState,
    status: StatusCache,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Server> {
    let body_limit = state.limits.body_bytes;
    let shared = web::Data::new(shared(state, status)?);
    tokio::spawn(cache::keep_fresh(
        Arc::downgrade(&shared.clone().into_inner()),
        status_parts,
    ));
    tokio::spawn(feed::keep_following(
        Arc::downgrade(&shared.clone().into_inner()),
        feed_parts,
    ));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shared.clone())
            .app_data(
                web::JsonConfig::default()
                    .limit(body_limit)
                    // Bodies are parsed as JSON whatever their declared
                    // type: `curl -d` works, and nothing else is accepted.
                    .content_type_required(false)
                    .error_handler(errors::json_body_error(body_limit)),
            )
            .app_data(web::QueryConfig::default().error_handler(errors::query_error))
            .app_data(web::PathConfig::default().error_handler(errors::path_error))
            .service(resource("/healthz").get(observe::healthz))
            .configure(dashboard_routes)
            .service(
                resource("/metrics")
                    .wrap(from_fn(auth::require_admin))
                    .wrap(from_fn(auth::limit_concurrency))
                    .get(observe::get_metrics),
            )
            .service(
                web::scope("/v1/agents")
                    .wrap(from_fn(auth::limit_concurrency))
                    .service(resource("/{machine:.+}/connect").post(agents::connect))
                    .service(resource("/{machine:.+}/heartbeat").post(agents::heartbeat)),
            )
            .service(
                web::scope("/v1/webhooks")
                    .wrap(from_fn(auth::limit_concurrency))
                    .service(resource("/{provider}").post(webhooks::receive)),
            )
            .service(
                web::scope("/v1")
                    .wrap(from_fn(auth::require_admin))
                    .wrap(from_fn(auth::limit_concurrency))
                    .configure(admin_routes),
            )
            .default_service(web::to(errors::no_route))
    })
    // Each connection's socket, for the responses that set its options.
    .on_connect(socket::remember_socket)
    .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
    // A response written in several pieces (the status is handed over in
    // slices) must not wait for the client's delayed ACK of the previous
    // piece: with Nagle's algorithm on, a reader could wait 40 ms for it.
    .tcp_nodelay(true);
    let server = match tls {
        Some(config) => server.listen_rustls_0_23(listener, config)?,
        None => server.listen(listener)?,
    };
    Ok(server.run())
}
