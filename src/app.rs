//! `berth serve`: one [`Application`] owns start-up. It reads the
//! configuration, opens the store, makes the admin token on first start,
//! opens the provider, starts the engine and serves the API, and shuts all
//! of it down cleanly.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix_web::dev::Server;

use crate::api::{self, ApiState, Limits, PricingSource, ProviderInfo};
use crate::config::{Config, ProviderKind};
use crate::contracts::provider::{ControllerContact, Provider};
use crate::contracts::secrets::new_secret;
use crate::contracts::secrets::Secret;
use crate::engine::broker::RateLimits;
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::providers::sim::SimProvider;
use crate::status::cache::StatusCache;
use crate::store::db::DatabaseUrl;
use crate::store::{Store, StoreError};
use crate::tls;

/// The admin token's file in the data directory (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// The webhook secret's file, when the configuration gives none.
pub const WEBHOOK_SECRET_FILE: &str = "webhook.secret";
/// The simulated cloud's instance ledger.
pub const SIM_LEDGER_FILE: &str = "sim-ledger.db";

/// Why berth could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot start the {kind} provider: {message}")]
    Provider { kind: &'static str, message: String },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the API: {0}")]
    Api(#[source] std::io::Error),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error(
        "another berth controller is using the SQLite store {}: SQLite serves one controller; \
         to run several, point them all at one PostgreSQL database \
         (database_url = \"postgres://...\")",
        .0.display()
    )]
    SqliteInUse(PathBuf),
}

/// A controller's claim on a SQLite store: an exclusive lock on
/// `<database>.lock`, held while the controller runs and let go by the
/// kernel when it exits, however it exits.
pub struct SqliteClaim {
    _file: std::fs::File,
}

impl SqliteClaim {
    /// Claims the SQLite store at `database`.
    ///
    /// # Errors
    ///
    /// [`AppError::SqliteInUse`] when another controller holds it;
    /// [`AppError::DataDir`] when the lock file cannot be opened.
    pub fn take(database: &Path) -> Result<SqliteClaim, AppError> {
        let mut name = database.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock)
            .map_err(|source| AppError::DataDir {
                path: lock.clone(),
                source,
            })?;
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: flock only reads the descriptor, which `file` owns
            // and keeps open for as long as the claim lives.
            let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if taken != 0 {
                let error = std::io::Error::last_os_error();
                return Err(if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    AppError::SqliteInUse(database.to_path_buf())
                } else {
                    AppError::DataDir {
                        path: lock,
                        source: error,
                    }
                });
            }
        }
        Ok(SqliteClaim { _file: file })
    }
}

/// A running controller.
pub struct Application {
    port: u16,
    server: Server,
    engine: Engine,
    store: Store,
    data_dir: PathBuf,
    /// Held while the controller runs on a SQLite store.
    _sqlite_claim: Option<SqliteClaim>,
}

impl Application {
    /// Starts everything `config` describes. Must run inside an actix
    /// system (`actix_web::main`, `actix_web::test`).
    ///
    /// # Errors
    ///
    /// [`AppError`], naming what could not be used.
    pub async fn build(config: Config) -> Result<Application, AppError> {
        // Checked again as a whole: flags (`--listen`) are applied after
        // the file and the environment were checked.
        config
            .validate()
            .map_err(|message| crate::config::ConfigError::Invalid {
                origin: "the configuration with its command-line flags".into(),
                message,
            })?;
        let data_dir = config.data_dir();
        create_private_dir(&data_dir)?;
        let url = DatabaseUrl::parse(&config.database_url())?;
        let store = {
            let url = url.clone();
            tokio::task::spawn_blocking(move || Store::open(&url))
                .await
                .map_err(|e| StoreError::Connect(e.to_string()))??
        };
        log::info!("store: {url}");
        // Claimed once the store has opened (so that a store that cannot
        // be opened says why in its own words) and before anything is
        // written.
        let sqlite_claim = match &url {
            DatabaseUrl::Sqlite(path) => Some(SqliteClaim::take(path)?),
            DatabaseUrl::Postgres(_) => None,
        };
        ensure_admin_token(&store, &data_dir).await?;
        let webhook_secret = match &config.webhook_secret {
            Some(secret) => Secret::new(secret.clone()),
            None => model_webhook_secret(&store, &data_dir.join(WEBHOOK_SECRET_FILE)).await?,
        };
        // The status is read and rendered while the provider opens (the
        // simulated cloud then reads its ledger behind, giving way to
        // this read), so that the first request after a start does not
        // wait for either.
        let status = prepare_status(&store, config.provider.kind.name());
        // TLS before the provider, so that a bad certificate stops the
        // start before anything else is opened.
        let tls = if config.tls.serves_tls(config.listen) {
            let names = tls::server_names(
                config.listen,
                config.controller_url.as_deref(),
                &config.tls.names,
            );
            Some(tls::server_identity(&config.tls, &data_dir, &names)?)
        } else {
            None
        };
        let (provider, defaults, sim) = open_provider(&config, &url, &data_dir).await?;
        let limits = config.provider.limits.over(defaults);
        let listener = TcpListener::bind(config.listen).map_err(|source| AppError::Listen {
            address: config.listen.to_string(),
            source,
        })?;
        let address = listener.local_addr().map_err(AppError::Api)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let controller = ControllerContact {
            url: config
                .controller_url
                .clone()
                .unwrap_or_else(|| format!("{scheme}://{address}")),
            ca_cert: tls.as_ref().and_then(|identity| identity.ca_cert.clone()),
        };
        let provider_info = ProviderInfo::of(provider.as_ref(), &controller.url);
        if let Some(refused) = &provider_info.ssh_refused {
            // Not a reason to stop: the cloud's agents may not use the
            // URL (the simulated cloud's do not); only ssh: hosts, which
            // are refused until it is set, need it.
            log::warn!("{refused}: until then, hosts added with ssh: are refused");
        }
        // The engine starts once the status is read: its own first read
        // of every machine and instance would take the cores and the
        // memory the status's read needs, and the API answers sooner.
        let status = status.await.unwrap_or_default();
        let metrics = Arc::new(Metrics::new());
        let engine = Engine::start(
            store.clone(),
            provider.clone(),
            &config.provisioner,
            limits,
            controller,
            metrics.clone(),
            &config.manual,
        )?;
        let state = ApiState {
            store: store.clone(),
            link: engine.link(),
            provider: provider_info,
            metrics,
            webhook_secret: Some(webhook_secret),
            limits: Limits {
                max_event_streams: event_stream_limit(config.api.max_event_streams),
                ..Limits::default()
            },
            sim,
            pricing: Some(PricingSource {
                provider: provider.clone(),
                price_ceiling: config.provisioner.price_ceiling(),
            }),
        };
        let server =
            api::server_with_status(listener, state, status, tls.map(|identity| identity.config))
                .map_err(AppError::Api)?;
        log::info!(
            "berth controller listening on {scheme}://{address} (provider {}, data in {})",
            provider.name(),
            data_dir.display()
        );
        Ok(Application {
            port: address.port(),
            server,
            engine,
            store,
            data_dir,
            _sqlite_claim: sqlite_claim,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves until SIGINT or SIGTERM (or the server's handle stops it),
    /// then waits for every acknowledged and queued write to be committed.
    ///
    /// # Errors
    ///
    /// The server's I/O error.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let served = self.server.await;
        if let Err(e) = self.store.flush().await {
            log::error!("could not flush the store on shutdown: {e}");
        }
        log::info!("berth controller stopped");
        served
    }
}

/// File descriptors kept for everything but event streams: other
/// requests, the store's connections, the provider's, logs.
const DESCRIPTORS_FOR_THE_REST: u64 = 1024;

/// How many event streams may be open: `configured`, lowered to what the
/// process's open-file limit leaves once [`DESCRIPTORS_FOR_THE_REST`] are
/// set aside. Raises the soft limit to the hard one first, as servers
/// that hold many connections do.
fn event_stream_limit(configured: usize) -> usize {
    let Some(open_files) = raise_open_file_limit() else {
        return configured;
    };
    let allowed = open_files.saturating_sub(DESCRIPTORS_FOR_THE_REST).max(1);
    let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
    if configured > allowed {
        log::warn!(
            "api.max_event_streams is {configured} but the open-file limit ({open_files}) leaves room for {allowed}; at most {allowed} event streams will be served"
        );
        return allowed;
    }
    configured
}

/// Raises the soft open-file limit to the hard limit and returns the soft
/// limit now in force (`None` if it cannot be read).
#[cfg(unix)]
fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`, a valid
    // rlimit owned by this frame.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}

#[cfg(not(unix))]
fn raise_open_file_limit() -> Option<u64> {
    None
}

/// Creates `dir` (and parents) readable by its owner only.
fn create_private_dir(dir: &Path) -> Result<(), AppError> {
    let failed = |source| AppError::DataDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(failed)?;
    }
    Ok(())
}

/// Writes `contents` to `path`, readable by its owner only.
fn write_private(path: &Path, contents: &str) -> Result<(), AppError> {
    let failed = |source| AppError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(failed)?;
    file.write_all(contents.as_bytes()).map_err(failed)?;
    file.write_all(b"\n").map_err(failed)?;
    file.sync_all().map_err(failed)
}

/// Writes the model's admin token to `<data-dir>/admin.token` for the
/// local command line. The first controller on a store makes the token;
/// later controllers (and this one after a restart, or after the file was
/// lost) read it from the store and never replace it.
async fn ensure_admin_token(store: &Store, data_dir: &Path) -> Result<(), AppError> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let on_disk = read_secret_file(&path);
    let token = store.model_admin_token(on_disk.clone()).await?;
    if keep_in_file(&path, on_disk.as_ref(), &token)? {
        log::info!("admin token written to {}", path.display());
    }
    Ok(())
}

/// Writes the model's `secret` to `path` unless `on_disk`, what the file
/// held, is that secret already; true if it wrote.
fn keep_in_file(path: &Path, on_disk: Option<&Secret>, secret: &Secret) -> Result<bool, AppError> {
    if on_disk.map(Secret::expose) == Some(secret.expose()) {
        return Ok(false);
    }
    write_private(path, secret.expose())?;
    Ok(true)
}

/// The secret in `path`, if it holds one.
fn read_secret_file(path: &Path) -> Option<Secret> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| Secret::new(text))
}

/// The model's webhook secret, from the store (made by the first
/// controller; a secret already in the data directory's file is kept as
/// the model's, so that providers set up with it go on working), written
/// to `path` for the operator who sets up a provider's webhooks.
async fn model_webhook_secret(store: &Store, path: &Path) -> Result<Secret, AppError> {
    let on_disk = read_secret_file(path);
    let fresh = on_disk.clone().unwrap_or_else(new_secret);
    let secret = store
        .model_secret(crate::store::credentials::WEBHOOK_SECRET, fresh)
        .await?;
    keep_in_file(path, on_disk.as_ref(), &secret)?;
    Ok(secret)
}

/// Starts reading and rendering the status on a thread of its own. If that
/// fails, the failure is logged and the cache is left empty: the first
/// request reads again, and answers with the error if it persists.
fn prepare_status(store: &Store, cloud: &'static str) -> tokio::task::JoinHandle<StatusCache> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        StatusCache::prepared(&store, cloud).unwrap_or_else(|e| {
            log::warn!("cannot read the status at start: {e}");
            StatusCache::default()
        })
    })
}

/// The provider `config` names, its rate limits, and the simulated cloud
/// again when that is the provider (for its fault routes). The simulated
/// cloud keeps its ledger in the data directory with a SQLite store, and
/// in the store's database with PostgreSQL, where every controller on the
/// database shares it.
async fn open_provider(
    config: &Config,
    store_url: &DatabaseUrl,
    data_dir: &Path,
) -> Result<(Arc<dyn Provider>, RateLimits, Option<Arc<SimProvider>>), AppError> {
    match config.provider.kind {
        ProviderKind::Sim => {
            let failed = |message: String| AppError::Provider {
                kind: "sim",
                message,
            };
            let sim_config = config.provider.sim.clone();
            let ledger = data_dir.join(SIM_LEDGER_FILE);
            let store_url = store_url.clone();
            // Opening a ledger file or database blocks.
            let sim = tokio::task::spawn_blocking(move || match store_url {
                DatabaseUrl::Postgres(url) => SimProvider::open_shared(sim_config, &url),
                DatabaseUrl::Sqlite(_) => SimProvider::open(sim_config, Some(ledger)),
            })
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(e.to_string()))?;
            let sim = Arc::new(sim);
            Ok((sim.clone(), RateLimits::default(), Some(sim)))
        }
        ProviderKind::Ec2 => {
            let (provider, limits) = open_ec2(config).await?;
            Ok((provider, limits, None))
        }
    }
}

/// The configuration `berth serve` runs with: defaults, then the file
/// (`--config` or `BERTH_CONFIG`), then `BERTH_*` variables, then the other
/// flags.
///
/// # Errors
///
/// [`crate::config::ConfigError`] naming what is wrong.
pub fn config_for(args: &crate::cli::ServeArgs) -> Result<Config, crate::config::ConfigError> {
    let mut config = Config::load(args.config.as_deref(), std::env::vars())?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir = Some(dir.clone());
    }
    if let Some(url) = &args.database_url {
        config.database_url = Some(url.clone());
    }
    Ok(config)
}

/// `berth serve` with its command-line arguments.
///
/// # Errors
///
/// As [`config_for`] and [`serve`].
pub fn serve_with_args(args: &crate::cli::ServeArgs) -> Result<(), AppError> {
    serve(config_for(args)?)
}

/// The EC2 provider of `[provider.ec2]`, with AWS's published rate limits.
#[cfg(feature = "ec2")]
async fn open_ec2(config: &Config) -> Result<(Arc<dyn Provider>, RateLimits), AppError> {
    use crate::providers::ec2::{preflight, Ec2Config, Ec2Provider};
    let failed = |message: String| AppError::Provider {
        kind: "ec2",
        message,
    };
    let table = config.provider.ec2.clone().unwrap_or_default();
    let ec2 = Ec2Config::from_table(&table).map_err(|e| failed(e.to_string()))?;
    // What instances need, before anything is spent on them.
    preflight::check_controller_url(config.controller_url.as_deref(), &config.listen.to_string())
        .map_err(|e| failed(e.to_string()))?;
    preflight::check_agent_binary(&ec2)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let provider = Ec2Provider::open(ec2)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok((Arc::new(provider), RateLimits::ec2()))
}

#[cfg(not(feature = "ec2"))]
async fn open_ec2(_config: &Config) -> Result<(Arc<dyn Provider>, RateLimits), AppError> {
    Err(AppError::Provider {
        kind: "ec2",
        message: "this berth was built without the EC2 provider (cargo feature `ec2`)".into(),
    })
}

/// Runs `berth serve` with `config` until it is stopped. Logging goes
/// through env_logger (`RUST_LOG`, default `info`).
///
/// # Errors
///
/// [`AppError`] if it cannot start; the server's I/O error if it fails.
pub fn serve(config: Config) -> Result<(), AppError> {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .try_init();
    actix_web::rt::System::new().block_on(async move {
        let app = Application::build(config).await?;
        app.run_until_stopped().await.map_err(AppError::Api)
    })
}
