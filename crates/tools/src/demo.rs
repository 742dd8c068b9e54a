//! `traqlyte demo`: the first command a newcomer runs. On a fresh embedded SQLite file it
//! starts the server in-process, creates a tenant and an A/A campaign (two arms, **no true
//! effect**), then simulates users whose at-least-once client loses replies more often in
//! treatment (2 % of requests in control, 10 % in treatment) and retries them as real
//! second HTTP requests with the same `dedupe_key`. The report then shows a naive lift
//! that is statistically significant and a deduplicated lift that is not.
//!
//! Everything random comes from one seeded generator per simulated user (`SplitMix64`),
//! so a seed always produces the same figures; see `unit_id_in_arm` for how the arm
//! split stays reproducible although each campaign gets a fresh random salt.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use traqlyte_experiments::bucketing;
use traqlyte_experiments::report::WindowReport;
use traqlyte_experiments::{CampaignId, Report};
use traqlyte_identity::{format_rfc3339_micros, parse_rfc3339_micros};
use traqlyte_server::ServerConfig;
use traqlyte_stats::Lift;
use traqlyte_store::{now_us, Arm, Store, StoreConfig, TenantName};

/// Options of `traqlyte demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// SQLite file for the demo. It is deleted and recreated on every run, so its file
    /// name must contain "demo" (a guard against wiping a real database).
    #[arg(long, default_value = "traqlyte-demo.db")]
    database: PathBuf,
    /// Address to serve on (port 0 picks a free port). Without it the demo takes
    /// 127.0.0.1:8080, or a free port when 8080 is taken (by `traqlyte serve`, say).
    #[arg(long)]
    listen: Option<String>,
    /// Seed of the simulation: the same seed gives the same figures.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    seed: u64,
    /// Simulated users (split 1:1 between control and treatment).
    #[arg(long, default_value_t = 20_000)]
    users: usize,
    /// Simulated users whose requests are in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Exit after printing the summary instead of serving until Ctrl-C.
    #[arg(long)]
    no_serve: bool,
    /// Also print the key figures as one JSON line, right after the report (before the
    /// page and server lines), for scripts and tests.
    #[arg(long)]
    json: bool,
}

/// The seed whose run the README and the tests quote.
const SEED_DEFAULT: u64 = 42;
/// Share of users who buy, the same in both arms: the campaign has no true effect.
const PURCHASE_RATE: f64 = 0.25;
/// Order amounts are uniform between these, in cents.
const AMOUNT_CENTS_MIN: u64 = 2_000;
const AMOUNT_CENTS_MAX: u64 = 8_000;
/// Probability that the client loses the reply to one request (each attempt, retries
/// included), per arm: the treatment page is heavier, so its replies are lost more often.
const REPLY_LOSS_CONTROL: f64 = 0.02;
const REPLY_LOSS_TREATMENT: f64 = 0.10;
/// Attempts per request before the simulated client gives up losing replies.
const ATTEMPTS_MAX: u32 = 8;
/// Candidate unit ids tried per user to land in the arm the seed chose (each lands there
/// with probability 1/2, so 64 failures are out of reach).
const UNIT_ID_TRIES_MAX: u32 = 64;
/// Width of each metric's event-time window.
const WINDOW_HOURS: u32 = 24;
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

const ARMS: [ArmKey; 2] = [ArmKey::Control, ArmKey::Treatment];
/// Where the demo serves unless told otherwise: `serve`'s own default.
const LISTEN_PREFERRED: &str = "127.0.0.1:8080";

/// Runs the demo; unless `--no-serve`, keeps serving until `shutdown` completes.
pub async fn run(
    args: DemoArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    // Fail on a taken port before the database file is deleted, not after.
    let listen = choose_listen(args.listen.as_deref(), LISTEN_PREFERRED)?;
    recreate_database(&args.database)?;
    let server = Server::start(&args, &listen).await?;
    let (_, key) = server
        .store
        .create_tenant(&TenantName::parse("TraqLyte demo").map_err(anyhow::Error::msg)?)
        .await
        .context("create the demo tenant")?;
    let api = Api::new(&server.address, key.expose())?;
    crate::outln!("TraqLyte demo: an A/A experiment behind an at-least-once client");
    crate::outln!("  database   {} (recreated)", args.database.display());
    crate::outln!("  server     {}", server.address);
    crate::outln!(
        "  API key    {}   (log in to the web page with it)",
        key.expose()
    );
    let campaign = create_campaign(&api).await?;
    crate::outln!(
        "  campaign   {} ({}): control and treatment, weights 1:1, metrics purchase (conversion) and revenue (sum)",
        campaign.key, campaign.id
    );
    let tally = simulate(&api, &campaign, &args).await?;
    let report: Report = api
        .get(&format!("/campaigns/{}/report", campaign.id))
        .await?;
    let page = format!("{}/ui/campaigns/{}", server.address, campaign.id);
    print_summary(&report, &tally)?;
    if args.json {
        // No page address when the server stops right after: it would lead nowhere.
        let served = (!args.no_serve).then_some(page.as_str());
        crate::outln!("{}", summary_json(&report, &tally, &args, served)?);
    }
    // The client's idle keep-alive connections would otherwise delay the graceful shutdown.
    drop(api);
    if args.no_serve {
        crate::outln!("The server stopped (--no-serve); run the demo without it to browse the report's web page.");
        return server.stop().await;
    }
    crate::outln!("");
    crate::outln!("See it on the web page: {page}  (log in with the API key above)");
    crate::outln!("Serving {} until Ctrl-C.", server.address);
    shutdown.await;
    server.stop().await
}

/// The address to serve on: the one given (which must be free), else 127.0.0.1:8080, else
/// (when `traqlyte serve` or anything else holds 8080) a free port, said aloud.
fn choose_listen(given: Option<&str>, preferred: &str) -> Result<String> {
    if let Some(address) = given {
        std::net::TcpListener::bind(address).with_context(|| {
            format!("listen on {address} (pass --listen 127.0.0.1:0 for any free port)")
        })?;
        return Ok(address.to_string());
    }
    match std::net::TcpListener::bind(preferred) {
        Ok(_) => Ok(preferred.to_string()),
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
            crate::outln!("{preferred} is taken (is `traqlyte serve` running?): the demo takes a free port instead.");
            Ok("127.0.0.1:0".to_string())
        }
        Err(err) => Err(err).with_context(|| format!("listen on {preferred}")),
    }
}

/// The two arms of the demo campaign; the first is the control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArmKey {
    Control,
    Treatment,
}

impl ArmKey {
    fn as_str(self) -> &'static str {
        match self {
            ArmKey::Control => "control",
            ArmKey::Treatment => "treatment",
        }
    }

    fn reply_loss(self) -> f64 {
        match self {
            ArmKey::Control => REPLY_LOSS_CONTROL,
            ArmKey::Treatment => REPLY_LOSS_TREATMENT,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Deletes the demo's SQLite file and its WAL companions, refusing a name without "demo".
fn recreate_database(path: &Path) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains("demo") {
        bail!(
            "refusing to use {}: the demo deletes and recreates its database on every run, so the file name must contain \"demo\"",
            path.display()
        );
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(err).with_context(|| format!("remove {}", Path::new(&file).display()))
            }
        }
    }
    Ok(())
}

/// The server, running in this process on the demo's database.
struct Server {
    store: Store,
    address: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(args: &DemoArgs, listen: &str) -> Result<Server> {
        let url = args
            .database
            .to_str()
            .context("the database path must be valid UTF-8")?;
        let mut config = StoreConfig::new(url);
        config.pool_connections_max = u32::try_from(args.concurrency.clamp(4, 64)).unwrap_or(16);
        let store = Store::connect(&config)
            .await
            .with_context(|| format!("open {url}"))?;
        store.migrate().await.context("apply migrations")?;
        let server_config = ServerConfig {
            listen: listen.to_string(),
            ..ServerConfig::default()
        };
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let on_bound = move |address| {
            let _ = bound_tx.send(address);
        };
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(traqlyte_server::serve(
            store.clone(),
            server_config,
            on_bound,
            shutdown,
        ));
        let Ok(address) = bound_rx.await else {
            let cause = match task.await {
                Ok(Err(err)) => err.to_string(),
                _ => "the server stopped".to_string(),
            };
            bail!("listen on {listen}: {cause}");
        };
        Ok(Server {
            store,
            address: format!("http://{address}"),
            stop,
            task,
        })
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let served = self
            .task
            .await
            .context("the server task failed")?
            .context("serve HTTP");
        // The write-ahead log checkpointed into the file and removed, as every command
        // leaves its SQLite file (bounded: a connection still held must not keep the
        // process up).
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.store.close()).await;
        served
    }
}

/// A client of the demo's server for one tenant.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    fn new(base: &str, key: &str) -> Result<Api> {
        let client = reqwest::Client::builder()
            .timeout(HTTP_TIMEOUT)
            .build()
            .context("build the HTTP client")?;
        Ok(Api {
            client,
            base: base.to_string(),
            key: key.to_string(),
        })
    }

    /// POSTs `body` and returns the answer's JSON, failing on any status but `expected`.
    async fn post(
        &self,
        path: &str,
        body: String,
        idempotency_key: Option<&str>,
        expected: u16,
    ) -> Result<Value> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = idempotency_key {
            request = request.header("X-TL-Idempotency-Key", key);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .with_context(|| format!("read the answer to POST {path}"))?;
        if status != expected {
            bail!("POST {path} answered {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("POST {path} answered non-JSON"))
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let text = response.text().await.context("read the report")?;
        if !status.is_success() {
            bail!("GET {path} answered {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("GET {path} answered {text}"))
    }
}

/// The published demo campaign, with what the client needs to predict its bucketing.
#[derive(Clone)]
struct DemoCampaign {
    id: CampaignId,
    key: String,
    salt: String,
    arms: Vec<Arm>,
}

async fn create_campaign(api: &Api) -> Result<DemoCampaign> {
    let definition = json!({
        "key": "checkout-redesign",
        "name": "Checkout redesign (demo: no true effect, retries heavier in treatment)",
        "arms": [{"key": "control", "weight": 1}, {"key": "treatment", "weight": 1}],
        "metrics": [
            {"name": "purchase", "kind": "conversion", "window_hours": WINDOW_HOURS},
            {"name": "revenue", "kind": "sum", "window_hours": WINDOW_HOURS},
        ],
    });
    // Creation and publishing are not idempotent by content, so they carry transport
    // idempotency keys: a retried publish would otherwise mint a second version.
    let created = api
        .post(
            "/campaigns",
            definition.to_string(),
            Some("demo-create-campaign"),
            201,
        )
        .await?;
    let id = CampaignId::try_from(text_field(&created, "id")?)
        .map_err(|e| anyhow::anyhow!("the campaign id {e}"))?;
    let version = api
        .post(
            &format!("/campaigns/{id}/publish"),
            json!({"note": "demo"}).to_string(),
            Some("demo-publish-1"),
            201,
        )
        .await?;
    let arms: Vec<Arm> = serde_json::from_value(version.get("arms").cloned().unwrap_or_default())
        .context("the published version's arms")?;
    Ok(DemoCampaign {
        key: text_field(&created, "key")?,
        salt: text_field(&version, "salt")?,
        id,
        arms,
    })
}

fn text_field(value: &Value, key: &str) -> Result<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("the answer has no {key:?}: {value}"))
}

/// A small, fast generator with a well-mixed output (Steele, Lea and Flood's SplitMix64).
/// Each simulated user gets its own stream, so results do not depend on which worker
/// happens to run which user.
struct SplitMix64(u64);

impl SplitMix64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    fn for_user(seed: u64, user: u64) -> SplitMix64 {
        let mut mixer = SplitMix64(seed ^ user.wrapping_mul(0xd1b5_4a32_d192_ed03));
        SplitMix64(mixer.next_u64())
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(Self::GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one simulated user does, drawn from the seed before any request is sent.
struct User {
    index: usize,
    arm: ArmKey,
    /// The order amount in cents when the user buys.
    purchase_cents: Option<u64>,
    rng: SplitMix64,
}

impl User {
    fn draw(seed: u64, index: usize) -> User {
        let mut rng = SplitMix64::for_user(seed, index as u64);
        let arm = if rng.unit() < 0.5 {
            ArmKey::Control
        } else {
            ArmKey::Treatment
        };
        let buys = rng.unit() < PURCHASE_RATE;
        let cents = AMOUNT_CENTS_MIN + rng.next_u64() % (AMOUNT_CENTS_MAX - AMOUNT_CENTS_MIN + 1);
        User {
            index,
            arm,
            purchase_cents: buys.then_some(cents),
            rng,
        }
    }

    /// Whether the client loses the reply to the request it just sent.
    fn loses_reply(&mut self) -> bool {
        self.rng.unit() < self.arm.reply_loss()
    }
}

/// A unit id that the campaign's bucketing puts in `user.arm`.
///
/// The server buckets by a hash of the campaign's salt, which is random per campaign, so
/// the users' arms would differ on every run and so would the figures. Instead the seed
/// chooses each user's arm (a fair coin, like the 1:1 weights) and the client picks the
/// first of `demo-user-NNNNN`, `demo-user-NNNNN.1`, … that this salt buckets there. The
/// server still assigns every unit itself; the simulation checks it agrees.
fn unit_id_in_arm(campaign: &DemoCampaign, user: &User) -> Result<String> {
    for attempt in 0..UNIT_ID_TRIES_MAX {
        let unit_id = match attempt {
            0 => format!("demo-user-{:05}", user.index),
            n => format!("demo-user-{:05}.{n}", user.index),
        };
        let arm = bucketing::bucket(&campaign.salt, &unit_id, &campaign.arms)
            .context("the published version has no arms")?;
        if arm.key == user.arm.as_str() {
            return Ok(unit_id);
        }
    }
    bail!(
        "no unit id for user {} landed in {}",
        user.index,
        user.arm.as_str()
    )
}

/// Requests the simulation sent, counted as they are answered.
#[derive(Default)]
struct Tally {
    assignments: AtomicU64,
    outcome_requests: AtomicU64,
    /// Requests re-sent because their reply was "lost", per arm.
    retries: [AtomicU64; 2],
    inserted: AtomicU64,
    /// Outcomes the server answered as duplicates.
    duplicates: AtomicU64,
    elapsed_ms: AtomicU64,
}

impl Tally {
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn requests(&self) -> u64 {
        Self::get(&self.assignments) + Self::get(&self.outcome_requests)
    }
}

async fn simulate(api: &Api, campaign: &DemoCampaign, args: &DemoArgs) -> Result<Arc<Tally>> {
    crate::outln!("");
    crate::outln!(
        "Simulating {} users with no true effect. Their client loses the reply to {:.0}% of requests in control and {:.0}% in treatment, and re-sends each with the same dedupe_key.",
        group(args.users as u64),
        REPLY_LOSS_CONTROL * 100.0,
        REPLY_LOSS_TREATMENT * 100.0
    );
    let bar = ProgressBar::new(args.users as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "  {bar:40.cyan/blue} {pos}/{len} users  {per_sec}  eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let campaign = Arc::new(campaign.clone());
    let mut workers = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (api, campaign, tally, bar) =
            (api.clone(), campaign.clone(), tally.clone(), bar.clone());
        let (next, failed, seed, users) = (next.clone(), failed.clone(), args.seed, args.users);
        workers.push(tokio::spawn(async move {
            while !failed.load(Ordering::Relaxed) {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= users {
                    break;
                }
                let user = User::draw(seed, index);
                if let Err(err) = simulate_user(&api, &campaign, user, &tally).await {
                    failed.store(true, Ordering::Relaxed);
                    return Err(err);
                }
                bar.inc(1);
            }
            Ok(())
        }));
    }
    for worker in workers {
        worker.await.context("a simulation worker panicked")??;
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    tally.elapsed_ms.store(
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    print_traffic(&tally, elapsed);
    Ok(tally)
}

/// One user: an assignment, then (if the user buys) one batch of two outcomes, re-sent
/// whenever its reply is lost.
async fn simulate_user(
    api: &Api,
    campaign: &DemoCampaign,
    mut user: User,
    tally: &Tally,
) -> Result<()> {
    let unit_id = unit_id_in_arm(campaign, &user)?;
    let assignment = api
        .post(
            "/assignments",
            json!({"campaign_id": campaign.id, "unit_id": unit_id}).to_string(),
            None,
            200,
        )
        .await?;
    tally.assignments.fetch_add(1, Ordering::Relaxed);
    let arm = text_field(&assignment, "arm")?;
    if arm != user.arm.as_str() {
        bail!(
            "the server put {unit_id} in {arm}, the client's bucketing said {}",
            user.arm.as_str()
        );
    }
    let Some(cents) = user.purchase_cents else {
        return Ok(());
    };
    let assignment_id = text_field(&assignment, "assignment_id")?;
    let assigned_at_us = parse_rfc3339_micros(&text_field(&assignment, "assigned_at")?)
        .map_err(|reason| anyhow::anyhow!("assigned_at: {reason}"))?;
    // The purchase happens after the exposure, so it falls inside the event-time window.
    let occurred_at = format_rfc3339_micros(now_us().max(assigned_at_us));
    let order = format!("order_{:05}", user.index);
    let body = json!([
        {"assignment_id": assignment_id, "dedupe_key": format!("demo:purchase:{unit_id}:{order}"),
         "metric": "purchase", "occurred_at": occurred_at},
        {"assignment_id": assignment_id, "dedupe_key": format!("demo:revenue:{unit_id}:{order}"),
         "metric": "revenue", "value": cents as f64 / 100.0, "occurred_at": occurred_at},
    ])
    .to_string();
    for attempt in 1..=ATTEMPTS_MAX {
        let answer = api.post("/outcomes/batch", body.clone(), None, 200).await?;
        tally.outcome_requests.fetch_add(1, Ordering::Relaxed);
        check_batch_answer(&answer, attempt, tally)?;
        if attempt == ATTEMPTS_MAX || !user.loses_reply() {
            break;
        }
        tally.retries[user.arm.index()].fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The first delivery of the two outcomes inserts both; every retry is two duplicates.
fn check_batch_answer(answer: &Value, attempt: u32, tally: &Tally) -> Result<()> {
    let count = |key: &str| answer.get(key).and_then(Value::as_u64).unwrap_or(u64::MAX);
    let (inserted, duplicates) = (count("inserted"), count("duplicates"));
    let expected = if attempt == 1 { (2, 0) } else { (0, 2) };
    if (inserted, duplicates) != expected {
        bail!("attempt {attempt} of an outcome batch was answered {answer}");
    }
    tally.inserted.fetch_add(inserted, Ordering::Relaxed);
    tally.duplicates.fetch_add(duplicates, Ordering::Relaxed);
    Ok(())
}

fn print_traffic(tally: &Tally, elapsed: Duration) {
    let retries: u64 = tally.retries.iter().map(Tally::get).sum();
    crate::outln!(
        "  sent {} HTTP requests in {:.1} s: {} assignments and {} outcome batches, of which {} were re-sent after a lost reply ({} in control, {} in treatment)",
        group(tally.requests()),
        elapsed.as_secs_f64(),
        group(Tally::get(&tally.assignments)),
        group(Tally::get(&tally.outcome_requests)),
        group(retries),
        group(Tally::get(&tally.retries[0])),
        group(Tally::get(&tally.retries[1])),
    );
    // Each batch carries one outcome of each metric, so every re-sent batch brings the
    // store one duplicate per metric to suppress.
    let suppressed = Tally::get(&tally.duplicates);
    crate::outln!(
        "  the store inserted {} outcomes and suppressed {} duplicates ({} per metric: purchase and revenue)",
        group(Tally::get(&tally.inserted)),
        group(suppressed),
        group(suppressed / 2),
    );
}

/// One arm's figures for `metric` on event time, from the typed report.
fn metric<'a>(report: &'a Report, arm: ArmKey, metric: &str) -> Result<&'a WindowReport> {
    report
        .arm(arm.as_str())
        .and_then(|a| a.metrics.get(metric))
        .map(|m| &m.event_time)
        .with_context(|| format!("the report has no {metric} for {}", arm.as_str()))
}

fn units(report: &Report, arm: ArmKey) -> u64 {
    report.arm(arm.as_str()).map_or(0, |a| a.units)
}

/// How each metric is read, for the summary's headings.
const METRICS: [(&str, &str); 2] = [
    (
        "purchase",
        "conversion. Deduplicated: share of users who bought. Naive: purchase events per user, re-sent ones included",
    ),
    (
        "revenue",
        "sum. Deduplicated: revenue per user. Naive: revenue per user, re-sent values included",
    ),
];

fn print_summary(report: &Report, tally: &Tally) -> Result<()> {
    let srm = match report.srm.p_value {
        Some(p) if report.srm.flagged => format!("MISMATCH (p = {})", p_text(Some(p))),
        Some(p) => format!("ok (p = {})", p_text(Some(p))),
        None => "n/a".to_string(),
    };
    crate::outln!("");
    crate::outln!(
        "Report (GET /campaigns/{{id}}/report): {} users in control, {} in treatment; sample ratio {srm}",
        group(units(report, ArmKey::Control)),
        group(units(report, ArmKey::Treatment)),
    );
    for (name, reading) in METRICS {
        print_metric(report, name, reading)?;
    }
    let expected = |p: f64| p / (1.0 - p);
    crate::outln!("");
    crate::outln!(
        "A client that loses a reply with probability p re-sends p/(1-p) times per request on average: δ (suppressed duplicates / stored) ≈ {:.1}% in control and {:.1}% in treatment; the store suppressed {} duplicates in all, over both metrics.",
        expected(REPLY_LOSS_CONTROL) * 100.0,
        expected(REPLY_LOSS_TREATMENT) * 100.0,
        group(Tally::get(&tally.duplicates)),
    );
    crate::outln!("");
    if report.verdicts.is_empty() {
        crate::outln!(
            "Verdicts: none (deduplication does not change any conclusion for this seed)."
        );
    } else {
        crate::outln!("Verdicts:");
        for verdict in &report.verdicts {
            crate::outln!("  - {}", verdict.message);
        }
    }
    Ok(())
}

fn print_metric(report: &Report, name: &str, reading: &str) -> Result<()> {
    let is_sum = name == "revenue";
    crate::outln!("");
    crate::outln!("{name}: {reading}");
    crate::outln!(
        "  {:<10} {:>7} {:>8} {:>11} {:>7} {:>13} {:>10}",
        "arm",
        "users",
        "stored",
        "suppressed",
        if is_sum { "δ value" } else { "δ" },
        "deduplicated",
        "naive"
    );
    for arm in ARMS {
        let m = metric(report, arm, name)?;
        let delta = if is_sum { m.delta_value } else { m.delta };
        let value = |v: Option<f64>| match v {
            Some(v) if is_sum => format!("{v:.2}"),
            Some(v) => format!("{v:.4}"),
            None => "n/a".to_string(),
        };
        crate::outln!(
            "  {:<10} {:>7} {:>8} {:>11} {:>7} {:>13} {:>10}",
            arm.as_str(),
            group(units(report, arm)),
            group(m.stored_events),
            group(m.duplicates),
            delta.map_or_else(|| "n/a".to_string(), |d| format!("{:.1}%", d * 100.0)),
            value(m.value),
            value(m.naive_value),
        );
    }
    let treatment = metric(report, ArmKey::Treatment, name)?;
    crate::outln!("  lift of treatment over control, 95% interval, two-sided p-value:");
    print_lift("deduplicated", treatment.lift);
    print_lift("naive", treatment.naive_lift);
    crate::outln!(
        "    predicted naive (1+L)(1+δT)/(1+δC) - 1 = {}",
        percent(treatment.predicted_naive_lift, 1)
    );
    Ok(())
}

fn print_lift(label: &str, lift: Option<Lift>) {
    let Some(lift) = lift else {
        crate::outln!("    {label:<13} n/a");
        return;
    };
    let significant = match lift.p_value() {
        Some(p) if p < 0.05 => "SIGNIFICANT",
        Some(_) => "not significant",
        None => "",
    };
    crate::outln!(
        "    {label:<13} {:>7}  [{}, {}]  p = {:<8} {significant}",
        percent(lift.estimate(), 1),
        percent(lift.ci_low(), 1),
        percent(lift.ci_high(), 1),
        p_text(lift.p_value()),
    );
}

/// The key figures as one JSON object, for scripts and the demo's test; `page` is the
/// report's web page while the demo serves it (`null` with `--no-serve`).
fn summary_json(
    report: &Report,
    tally: &Tally,
    args: &DemoArgs,
    page: Option<&str>,
) -> Result<Value> {
    let purchase = metric(report, ArmKey::Treatment, "purchase")?;
    let revenue = metric(report, ArmKey::Treatment, "revenue")?;
    let lift = |l: Option<Lift>, f: fn(&Lift) -> Option<f64>| l.as_ref().and_then(f);
    let (estimate, p_value) = (Lift::estimate, Lift::p_value);
    Ok(json!({
        "seed": args.seed,
        "users": args.users,
        "units_control": units(report, ArmKey::Control),
        "units_treatment": units(report, ArmKey::Treatment),
        "metric": "purchase",
        "deduped_lift": lift(purchase.lift, estimate),
        "deduped_p": lift(purchase.lift, p_value),
        "naive_lift": lift(purchase.naive_lift, estimate),
        "naive_p": lift(purchase.naive_lift, p_value),
        "predicted_naive_lift": purchase.predicted_naive_lift,
        "delta_control": metric(report, ArmKey::Control, "purchase")?.delta,
        "delta_treatment": purchase.delta,
        "revenue_deduped_p": lift(revenue.lift, p_value),
        "revenue_naive_p": lift(revenue.naive_lift, p_value),
        "reply_loss_control": REPLY_LOSS_CONTROL,
        "reply_loss_treatment": REPLY_LOSS_TREATMENT,
        "requests": tally.requests(),
        "retries": tally.retries.iter().map(Tally::get).sum::<u64>(),
        "duplicates_answered": Tally::get(&tally.duplicates),
        "simulation_ms": Tally::get(&tally.elapsed_ms),
        "verdicts": report.verdicts.len(),
        "page": page,
    }))
}

fn percent(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) => format!("{:+.*}%", decimals, v * 100.0),
        None => "n/a".to_string(),
    }
}

fn p_text(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.0001 => "< 0.0001".to_string(),
        Some(p) => format!("{p:.4}"),
        None => "n/a".to_string(),
    }
}

/// `20000` → `20,000`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let chunks: Vec<String> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
        .collect();
    chunks.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_default_port_falls_back_to_a_free_one_but_a_given_one_fails() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let taken = holder.local_addr().expect("address").to_string();
        assert_eq!(
            choose_listen(None, &taken).expect("fallback"),
            "127.0.0.1:0"
        );
        assert!(choose_listen(Some(&taken), &taken).is_err());
        drop(holder);
        assert_eq!(choose_listen(None, &taken).expect("free again"), taken);
    }

    #[test]
    fn group_inserts_thousands_separators() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (20_000, "20,000"),
            (1_234_567, "1,234,567"),
        ] {
            assert_eq!(group(n), text);
        }
    }

    #[test]
    fn a_seed_always_draws_the_same_users() {
        let draw = |seed| {
            (0..100)
                .map(|i| {
                    let u = User::draw(seed, i);
                    (u.arm, u.purchase_cents)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn the_demo_refuses_to_delete_a_database_not_named_demo() {
        let err = recreate_database(Path::new("/nonexistent/traqlyte.db")).unwrap_err();
        assert!(err.to_string().contains("must contain \"demo\""), "{err}");
    }
}
