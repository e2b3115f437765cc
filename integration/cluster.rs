//! Several `berth serve` processes on one PostgreSQL database, with moto's
//! EC2 server or the shared simulated cloud as their cloud: the
//! provisioning lock (each machine's lease), takeover when a controller is
//! killed, fencing of a controller paused past its leases, the model's
//! secrets shared, status agreeing, and the command line failing over.
//!
//! Nothing boots in moto, so the moto tests check each agent in themselves
//! with the one-time password from its instance's user data, through
//! whichever controller is alive: an agent may reach any controller. In the
//! simulated cloud, agents check in by themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_ec2::Client;
use berth::contracts::provider::tags;
use berth::domain::instance::InstanceState;
use berth::domain::machine::MachineState;
use berth::providers::sim::{SimConfig, SimProvider};
use berth::store::db::DatabaseUrl;
use berth::store::records::MachineRecord;
use berth::store::Store;
use serde_json::{json, Value};

use crate::support::app::{berth_command, free_port};
use crate::support::moto_api::{
    self, any_image, live, moto_client, moto_instances, MotoInstance, REGION,
};
use crate::support::{eventually, moto, postgres};

/// What instances are told to reach: never contacted.
const CONTROLLER_URL: &str = "http://controller.invalid:17070";
/// Long enough for anything these tests wait for.
const PATIENCE: Duration = Duration::from_secs(120);
/// Short leases, so that takeover and fencing happen within a test.
const LEASE_TTL_S: u64 = 3;

/// One `berth serve` process of the cluster.
struct Served {
    url: String,
    data_dir: PathBuf,
    log: PathBuf,
    child: Child,
}

impl Served {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn token(&self) -> String {
        read(&self.data_dir.join("admin.token"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {signal} {}", self.pid());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The cloud a cluster's controllers share.
enum Cloud {
    Moto {
        client: Client,
        image: String,
    },
    /// The simulated cloud, its ledger in the cluster's database; the
    /// `[provider.sim]` settings.
    Sim(String),
}

/// Controllers sharing one fresh PostgreSQL database and one cloud.
struct Cluster {
    root: tempfile::TempDir,
    database: String,
    store: Store,
    cloud: Cloud,
}

impl Cluster {
    /// A cluster on moto's EC2 server.
    async fn new() -> Cluster {
        let client = moto_client().await;
        let image = any_image(&client).await;
        Cluster::on(Cloud::Moto { client, image }).await
    }

    async fn on(cloud: Cloud) -> Cluster {
        let database = postgres::fresh_database();
        let url = DatabaseUrl::parse(&database).unwrap();
        let store = tokio::task::spawn_blocking(move || Store::open(&url))
            .await
            .unwrap()
            .expect("the test's own look at the store");
        Cluster {
            root: tempfile::tempdir().unwrap(),
            database,
            store,
            cloud,
        }
    }

    fn moto(&self) -> &Client {
        match &self.cloud {
            Cloud::Moto { client, .. } => client,
            Cloud::Sim(_) => panic!("this cluster's cloud is the simulated one"),
        }
    }

    /// The `[provider]` part of a controller's configuration.
    fn provider_config(&self) -> String {
        match &self.cloud {
            Cloud::Moto { image, .. } => format!(
                r#"[provider]
kind = "ec2"

[provider.ec2]
region = "{REGION}"
endpoint_url = "{endpoint}"
image_has_agent = true

[provider.ec2.images]
"ubuntu@24.04/amd64" = "{image}"
"#,
                endpoint = moto::endpoint(),
            ),
            Cloud::Sim(settings) => format!(
                r#"[provider]
kind = "sim"

[provider.sim]
{settings}
"#
            ),
        }
    }

    /// Starts controller `name` with `provisioner` settings added to the
    /// cluster's, and waits until it answers.
    async fn start(&self, name: &str, provisioner: &str) -> Served {
        let port = free_port();
        let data_dir = self.root.path().join(name);
        let config = self.root.path().join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                r#"listen = "127.0.0.1:{port}"
database_url = "{database}"
controller_url = "{CONTROLLER_URL}"

{provider_config}
[provisioner]
lease_ttl_s = {LEASE_TTL_S}
reconcile_interval_s = 1
backoff_initial_ms = 20
backoff_max_ms = 200
call_timeout_s = 30
{provisioner}
"#,
                database = self.database,
                provider_config = self.provider_config(),
            ),
        )
        .unwrap();
        let log = self.root.path().join(format!("{name}.log"));
        let child = berth_command()
            .args(["serve", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data_dir)
            // moto's credentials; nothing else of AWS's is looked at.
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", self.root.path().join("no-aws-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                self.root.path().join("no-aws-credentials"),
            )
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("berth serve starts");
        let served = std::sync::Mutex::new(Served {
            url: format!("http://127.0.0.1:{port}"),
            data_dir,
            log,
            child,
        });
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually(&format!("{name} to answer"), PATIENCE, || async {
            {
                let mut served = served.lock().unwrap();
                if let Ok(Some(exit)) = served.child.try_wait() {
                    panic!("{name} exited ({exit}): {}", served.log());
                }
            }
            match http.get(format!("{url}/healthz")).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(other.map(|r| r.status())),
            }
        })
        .await;
        served.into_inner().unwrap()
    }

    fn controller_uuid(&self) -> String {
        self.store.model().unwrap().controller_uuid
    }

    async fn machines(&self) -> Vec<MachineRecord> {
        self.store.blocking(|s| s.status()).await.unwrap().machines
    }

    async fn instances(&self) -> Vec<MotoInstance> {
        moto_instances(self.moto(), &self.controller_uuid()).await
    }

    /// Checks in every machine waiting for its agent, through `through`.
    async fn check_in_waiting(&self, through: &Served) {
        let http = reqwest::Client::new();
        for machine in self.machines().await {
            if machine.state() != MachineState::AwaitingAgent {
                continue;
            }
            let instance = machine.instance_id().unwrap().to_string();
            let password = moto_api::agent_password(self.moto(), machine.id, &instance).await;
            // A conflict (the machine moved meanwhile) is tried again on
            // the next round.
            let _ = http
                .post(format!("{}/v1/agents/{}/connect", through.url, machine.id))
                .json(&json!({ "password": password }))
                .send()
                .await;
        }
    }

    /// Checks waiting agents in, through each of `through` in turn, until
    /// `units` machines exist and all are started.
    async fn check_in_until_started(&self, through: &[Served], units: usize) {
        let mut round = 0;
        eventually("every machine to start", PATIENCE, || {
            round += 1;
            let through = &through[round % through.len()];
            async move {
                self.check_in_waiting(through).await;
                let machines = self.machines().await;
                let started = machines
                    .iter()
                    .filter(|m| m.state() == MachineState::Started)
                    .count();
                if machines.len() == units && started == units {
                    Ok(())
                } else {
                    Err(format!("{started} of {} started", machines.len()))
                }
            }
        })
        .await;
    }
}

async fn deploy(through: &Served, units: u32) {
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/applications", through.url))
        .bearer_auth(through.token())
        .json(&json!({"charm": "wordpress", "num_units": units, "constraints": "mem=2G"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201, "{:?}", answer.text().await);
}

/// The machines part of a controller's status: each machine's instance and
/// agent status.
async fn machines_in_status(served: &Served) -> BTreeMap<String, (Value, Value)> {
    let status: Value = reqwest::Client::new()
        .get(format!("{}/v1/status", served.url))
        .bearer_auth(served.token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["machines"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, m)| {
            (
                id.clone(),
                (
                    m["instance-id"].clone(),
                    m["juju-status"]["current"].clone(),
                ),
            )
        })
        .collect()
}

/// The pid in a lease holder's name (`host-pid-random`).
fn holder_pid(holder: &str) -> u32 {
    let mut parts = holder.rsplitn(3, '-');
    let _random = parts.next();
    parts.next().unwrap().parse().unwrap()
}

/// How many machines each live lease holder holds.
fn holders(machines: &[MachineRecord]) -> BTreeMap<u32, usize> {
    let now = berth::store::now_ms();
    let mut held = BTreeMap::new();
    for lease in machines.iter().filter_map(|m| m.lease.as_ref()) {
        if lease.is_live(now) {
            *held.entry(holder_pid(&lease.holder)).or_default() += 1;
        }
    }
    held
}

/// Machines per zone, given each live instance's zone: never more than one
/// apart.
fn assert_spread<'a>(zones: impl IntoIterator<Item = &'a str>) {
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for zone in zones {
        *per_zone.entry(zone).or_default() += 1;
    }
    let (most, least) = (
        per_zone.values().max().copied().unwrap_or(0),
        per_zone.values().min().copied().unwrap_or(0),
    );
    assert!(most - least <= 1, "zones out of balance: {per_zone:?}");
}

impl Cluster {
    /// Starts controllers c0, c1 and c2 with `provisioner` settings, and
    /// waits until each knows of the others and has renewed since, so that
    /// new work is shared among the three.
    async fn start_three(&self, provisioner: &str) -> Vec<Served> {
        let mut controllers = Vec::new();
        for name in ["c0", "c1", "c2"] {
            controllers.push(self.start(name, provisioner).await);
        }
        // Each controller learns of the others at its next renewal.
        eventually("the three to know of each other", PATIENCE, || async {
            let live = self.store.live_controllers(berth::store::now_ms()).unwrap();
            if live.len() == 3 {
                Ok(())
            } else {
                Err(live)
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2 * LEASE_TTL_S / 3 + 1)).await;
        controllers
    }
}

/// SIGKILLs the controller holding the most machines (by `held`, as
/// [`holders`] counts them) and takes it out of `controllers`. Returns it,
/// with its place among the three and how many machines it held.
fn kill_the_busiest(
    controllers: &mut Vec<Served>,
    held: &BTreeMap<u32, usize>,
) -> (Served, usize, usize) {
    let (victim_pid, victim_held) = held
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(pid, n)| (*pid, *n))
        .unwrap();
    let victim = controllers
        .iter()
        .position(|c| c.pid() == victim_pid)
        .expect("the holder is one of the three");
    let mut killed = controllers.remove(victim);
    killed.signal("-KILL");
    let _ = killed.child.wait();
    (killed, victim, victim_held)
}

/// Waits until the two survivors' status agree on `units` machines, and
/// checks that every one of them is started.
async fn assert_survivors_agree(survivors: &[Served], units: usize) {
    let agreed = eventually("the survivors' status to agree", PATIENCE, || async {
        let first = machines_in_status(&survivors[0]).await;
        let second = machines_in_status(&survivors[1]).await;
        if first == second && first.len() == units {
            Ok(first)
        } else {
            Err((first.len(), second.len()))
        }
    })
    .await;
    assert!(agreed
        .values()
        .all(|(_, agent)| agent.as_str() == Some("started")));
}

#[actix_web::test]
async fn three_controllers_on_one_postgres_lose_one_to_sigkill_mid_deploy_and_start_every_machine_once(
) {
    let _turn = crate::support::heavy_test().await;
    let cluster = Cluster::new().await;
    let mut controllers = cluster.start_three("bootstrap_timeout_s = 3600").await;
    // One model, one set of secrets: every controller wrote the same token
    // and webhook secret, and the first one's made them.
    let token = controllers[0].token();
    for served in &controllers {
        assert_eq!(served.token(), token);
        assert_eq!(
            read(&served.data_dir.join("webhook.secret")),
            read(&controllers[0].data_dir.join("webhook.secret"))
        );
    }
    const UNITS: usize = 60;
    deploy(&controllers[0], UNITS as u32).await;

    // The work is shared: each controller claims its share. Then the one
    // holding the most machines is killed, mid-deploy.
    let held = eventually("every controller to hold machines", PATIENCE, || async {
        let held = holders(&cluster.machines().await);
        if held.len() == 3 && held.values().sum::<usize>() >= UNITS / 2 {
            Ok(held)
        } else {
            Err(held)
        }
    })
    .await;
    let (killed, victim, victim_held) = kill_the_busiest(&mut controllers, &held);
    eprintln!(
        "killed controller {victim} (pid {}) holding {victim_held} machines; held: {held:?}",
        killed.pid()
    );

    // The survivors take its machines over; the agents check in through
    // them, alternately.
    cluster.check_in_until_started(&controllers, UNITS).await;

    // Exactly one live instance per machine, and it is the machine's: no
    // duplicate and no stray (a launch taken over is adopted, not redone).
    let instances = eventually("one live instance per machine", PATIENCE, || async {
        let instances = cluster.instances().await;
        if live(&instances).len() == UNITS {
            Ok(instances)
        } else {
            Err(live(&instances).len())
        }
    })
    .await;
    let machines = cluster.machines().await;
    let recorded: BTreeSet<&str> = machines.iter().filter_map(|m| m.instance_id()).collect();
    let live_now = live(&instances);
    let live_ids: BTreeSet<&str> = live_now.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        recorded, live_ids,
        "the machines' instances are the live ones"
    );
    let tagged: BTreeSet<&str> = live_now
        .iter()
        .map(|i| i.tags[tags::MACHINE].as_str())
        .collect();
    assert_eq!(tagged.len(), UNITS, "one live instance per machine");
    eprintln!(
        "{} instances launched in all, {} live",
        instances.len(),
        live_now.len()
    );
    assert_spread(live_now.iter().map(|i| i.zone.as_str()));

    // Both survivors' status agree once they have read the last change.
    assert_survivors_agree(&controllers, UNITS).await;

    // The command line, given the dead controller first, answers from the
    // next one.
    let urls = format!("{},{}", killed.url, controllers[0].url);
    let out = berth_command()
        .args([
            "status", "--format", "json", "--url", &urls, "--token", &token,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["machines"].as_object().unwrap().len(), UNITS);
}

/// Adds `units` units of wordpress through `through`, in the API's
/// requests of at most 1,000.
async fn deploy_many(through: &Served, units: usize) {
    let http = reqwest::Client::new();
    let mut left = units;
    let mut first = true;
    while left > 0 {
        let count = left.min(1000);
        let (path, body) = if first {
            (
                "/v1/applications".to_string(),
                json!({"charm": "wordpress", "num_units": count}),
            )
        } else {
            (
                "/v1/applications/wordpress/units".to_string(),
                json!({ "num_units": count }),
            )
        };
        let answer = http
            .post(format!("{}{path}", through.url))
            .bearer_auth(through.token())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{:?}", answer.text().await);
        first = false;
        left -= count;
    }
}

#[actix_web::test]
async fn three_controllers_sharing_the_simulated_cloud_lose_one_to_sigkill_mid_deploy_of_2000_units(
) {
    const UNITS: usize = 2000;
    let _turn = crate::support::heavy_test().await;
    let cluster = Cluster::on(Cloud::Sim(
        "start_delay_ms = 1500\nagent_delay_ms = 300".to_string(),
    ))
    .await;
    let mut controllers = cluster.start_three("").await;
    let deployed = std::time::Instant::now();
    deploy_many(&controllers[0], UNITS).await;

    // Mid-deploy: every controller holds machines, agents are checking in,
    // and most machines are not started yet. The one holding the most is killed.
    let held = eventually("every controller to hold machines", PATIENCE, || async {
        let machines = cluster.machines().await;
        let held = holders(&machines);
        let started = machines
            .iter()
            .filter(|m| m.state() == MachineState::Started)
            .count();
        if held.len() == 3 && held.values().sum::<usize>() >= UNITS / 3 && started >= 50 {
            Ok((held, started))
        } else {
            Err((held, started))
        }
    })
    .await;
    let (held, started_before) = held;
    assert!(started_before < UNITS, "the deploy had finished");
    let (killed, victim, victim_held) = kill_the_busiest(&mut controllers, &held);
    eprintln!(
        "killed controller {victim} (pid {}) holding {victim_held} machines \
         with {started_before} of {UNITS} started, {:?} after the deploy; held: {held:?}",
        killed.pid(),
        deployed.elapsed()
    );

    eventually("every machine to start", PATIENCE * 3, || async {
        let machines = cluster.machines().await;
        let started = machines
            .iter()
            .filter(|m| m.state() == MachineState::Started)
            .count();
        if machines.len() == UNITS && started == UNITS {
            Ok(())
        } else {
            let mut states: BTreeMap<String, usize> = BTreeMap::new();
            for m in machines
                .iter()
                .filter(|m| m.state() != MachineState::Started)
            {
                *states.entry(format!("{:?}", m.state())).or_default() += 1;
            }
            let warnings: Vec<String> = controllers
                .iter()
                .flat_map(|c| {
                    c.log()
                        .lines()
                        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                        .take(5)
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect();
            Err(format!(
                "{started} of {} started; the others: {states:?}; warnings: {warnings:#?}",
                machines.len()
            ))
        }
    })
    .await;
    eprintln!("{UNITS} started {:?} after the deploy", deployed.elapsed());

    // The cloud, as the shared ledger has it: one instance ever launched
    // per machine (a launch taken over is adopted, not redone), each the
    // machine's and running, and none besides.
    let database = cluster.database.clone();
    let observer = tokio::task::spawn_blocking(move || {
        SimProvider::open_shared(SimConfig::default(), &database)
    })
    .await
    .unwrap()
    .unwrap();
    let ledger = observer.ledger();
    let mut per_machine: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &ledger {
        *per_machine
            .entry(entry.tags.get(tags::MACHINE).unwrap_or("none").to_string())
            .or_default() += 1;
    }
    assert_eq!(per_machine.len(), UNITS, "instances per machine tag");
    assert!(
        per_machine.values().all(|n| *n == 1),
        "machines launched twice: {:?}",
        per_machine
            .iter()
            .filter(|(_, n)| **n > 1)
            .collect::<Vec<_>>()
    );
    assert_eq!(ledger.len(), UNITS);
    assert!(ledger.iter().all(|e| e.state == InstanceState::Running));
    let machines = cluster.machines().await;
    let recorded: BTreeSet<&str> = machines.iter().filter_map(|m| m.instance_id()).collect();
    let running: BTreeSet<&str> = ledger.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(recorded, running, "the machines' instances are the cloud's");
    assert_spread(ledger.iter().map(|e| &*e.zone));

    assert_survivors_agree(&controllers, UNITS).await;
}

#[actix_web::test]
async fn a_controller_paused_past_its_leases_does_not_act_on_the_machines_taken_over() {
    let _turn = crate::support::heavy_test().await;
    let cluster = Cluster::new().await;
    // The first controller relaunches machines whose agents have not
    // checked in within 10 s; the second waits an hour.
    let first = cluster.start("paused", "bootstrap_timeout_s = 10").await;
    const UNITS: usize = 12;
    deploy(&first, UNITS as u32).await;
    eventually(
        "the first controller to launch every machine",
        PATIENCE,
        || async {
            let waiting = cluster
                .machines()
                .await
                .iter()
                .filter(|m| m.state() == MachineState::AwaitingAgent)
                .count();
            if waiting == UNITS {
                Ok(())
            } else {
                Err(waiting)
            }
        },
    )
    .await;
    let timers_due = std::time::Instant::now() + Duration::from_secs(10);
    let launched: BTreeSet<String> = cluster
        .instances()
        .await
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(launched.len(), UNITS);

    // Paused at once, while it holds every machine; the second starts.
    first.signal("-STOP");
    let second = cluster.start("second", "bootstrap_timeout_s = 3600").await;
    // Past the leases' expiry, the second takes every machine over.
    eventually(
        "the second controller to hold every machine",
        PATIENCE,
        || async {
            let held = holders(&cluster.machines().await);
            if held.get(&second.pid()) == Some(&UNITS) {
                Ok(())
            } else {
                Err(held)
            }
        },
    )
    .await;
    // Its bootstrap timers fall due while it sleeps.
    let wake = timers_due + Duration::from_secs(2);
    tokio::time::sleep(wake.saturating_duration_since(std::time::Instant::now())).await;
    first.signal("-CONT");
    // Awake, the first finds its leases gone and leaves the machines: its
    // timers fire, but it can neither write nor terminate.
    eventually(
        "the first controller to leave the machines",
        PATIENCE,
        || async {
            let log = first.log();
            if log.contains("no longer holds its lease") || log.contains("lease ran out") {
                Ok(())
            } else {
                Err(log
                    .lines()
                    .rev()
                    .take(5)
                    .map(str::to_string)
                    .collect::<Vec<_>>())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let instances = cluster.instances().await;
    let now: BTreeSet<String> = instances.iter().map(|i| i.id.clone()).collect();
    assert_eq!(now, launched, "nothing launched again");
    assert_eq!(live(&instances).len(), UNITS, "nothing terminated");
    let machines = cluster.machines().await;
    assert!(machines
        .iter()
        .all(|m| m.state() == MachineState::AwaitingAgent));
    assert_eq!(holders(&machines).get(&second.pid()), Some(&UNITS));

    // The second carries on: the agents check in through it.
    cluster
        .check_in_until_started(std::slice::from_ref(&second), UNITS)
        .await;
}
