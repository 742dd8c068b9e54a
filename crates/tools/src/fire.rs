//! `traqlyte fire`: one body sent many times concurrently, the way an at-least-once client
//! behaves when its replies are lost. Used by the tests (from several OS processes) and
//! handy for seeing dedupe work by hand.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use tokio::sync::Semaphore;

/// Options of `traqlyte fire`.
#[derive(Args)]
pub struct FireArgs {
    /// Full URL to POST to, e.g. http://127.0.0.1:8080/events/checkout_completed.
    #[arg(long)]
    url: String,
    /// API key of the tenant.
    #[arg(long, env = "TRAQLYTE_API_KEY", hide_env_values = true)]
    api_key: String,
    /// How many times to send the body.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// How many requests may be in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Extra header, `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
}

/// Sends stdin's body `count` times and prints
/// `{"statuses":{code: n},"bodies":{"<code> replayed=<bool> <body>": n},"errors":n}`;
/// fails (after printing) when any request got no HTTP answer at all.
pub async fn run(args: FireArgs) -> Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        eprintln!("fire: reading the body from stdin (e.g. `traqlyte fire … < event.json`); end it with Ctrl-D");
    }
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .context("read the body from stdin")?;
    anyhow::ensure!(
        !body.iter().all(u8::is_ascii_whitespace),
        "no body on stdin: give the JSON body to send, e.g. `traqlyte fire --url URL < event.json`"
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()
        .context("build the HTTP client")?;
    let mut headers = reqwest::header::HeaderMap::new();
    for line in &args.headers {
        let (name, value) = line
            .split_once(':')
            .context("--header must look like `Name: value`")?;
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())?,
            value.trim().parse()?,
        );
    }
    let permits = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let mut tasks = Vec::with_capacity(args.count);
    for _ in 0..args.count {
        let permit = permits.clone().acquire_owned().await?;
        let request = client
            .post(&args.url)
            .bearer_auth(&args.api_key)
            .header("content-type", "application/json")
            .headers(headers.clone())
            .body(body.clone());
        tasks.push(tokio::spawn(async move {
            let answer = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let replayed = response.headers().contains_key("idempotent-replayed");
                    response.bytes().await.map(|body| (status, replayed, body))
                }
                Err(err) => Err(err),
            };
            drop(permit);
            answer
        }));
    }
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut bodies: BTreeMap<String, usize> = BTreeMap::new();
    let mut errors = 0usize;
    for task in tasks {
        match task.await? {
            Ok((status, replayed, body)) => {
                *statuses.entry(status.to_string()).or_default() += 1;
                let key = format!(
                    "{status} replayed={replayed} {}",
                    String::from_utf8_lossy(&body)
                );
                *bodies.entry(key).or_default() += 1;
            }
            Err(err) => {
                errors += 1;
                tracing::warn!(error = %err, "request failed");
            }
        }
    }
    crate::outln!(
        "{}",
        serde_json::json!({"statuses": statuses, "bodies": bodies, "errors": errors})
    );
    // Like curl: an HTTP status is an answer (a 409 is what a collision test wants), a
    // request that got none is a failure a script must see.
    if errors > 0 {
        anyhow::bail!("{errors} of {} requests got no answer", args.count);
    }
    Ok(())
}
