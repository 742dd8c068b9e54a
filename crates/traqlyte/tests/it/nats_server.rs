//! Private `nats-server -js` processes for the JetStream consumer's tests: one server, or
//! a 3-node cluster on loopback ports, each with its own store directory, killed
//! (SIGKILL) when dropped. The shared service on 4222 is left alone, so tests never
//! share subjects or streams.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};

/// How long a server may take to accept connections, and a cluster to elect leaders.
const START_WAIT_MS: u64 = 30_000;

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("address").port()
}

/// True when a NATS server answers on `port`: it greets with `INFO` (another process
/// that took the port would not).
fn answers_as_nats(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut greeting = [0u8; 4];
    stream.read_exact(&mut greeting).is_ok() && &greeting == b"INFO"
}

/// One `nats-server` process.
pub struct NatsNode {
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    child: Child,
    store_dir: PathBuf,
}

/// A node's place in a cluster: the cluster's name, the route port to try first, and
/// every node's route URL.
struct ClusterSeat {
    cluster: String,
    route_port: u16,
    routes: String,
}

/// How many times a node is started on fresh ports when it exits at once (a port picked
/// free was taken by another test before `nats-server` bound it).
const START_ATTEMPTS: usize = 5;

impl NatsNode {
    /// Starts `nats-server` named `name`, on fresh ports again when it exits before it
    /// answers: ports are picked free, then released, then bound by the server, and
    /// another test can take one in between. A restarted cluster node keeps the other
    /// nodes' routes and dials them itself; routes are two-way, so the cluster forms.
    fn spawn(name: &str, seat: Option<&ClusterSeat>) -> NatsNode {
        let deadline = Instant::now() + Duration::from_millis(START_WAIT_MS);
        for attempt in 0..START_ATTEMPTS {
            let port = free_port();
            let store_dir = std::env::temp_dir().join(format!(
                "traqlyte_nats_{}_{name}_{port}",
                std::process::id()
            ));
            let mut command = Command::new("nats-server");
            command
                .args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-js",
                    "--server_name",
                    name,
                ])
                .arg("-sd")
                .arg(&store_dir);
            // A cluster node answers clients before it binds its route port, and exits
            // if that is taken: it is up once both ports answer as NATS.
            let route_port = seat.map(|seat| {
                if attempt == 0 {
                    seat.route_port
                } else {
                    free_port()
                }
            });
            if let (Some(seat), Some(route_port)) = (seat, route_port) {
                command.args([
                    "--cluster_name".to_string(),
                    seat.cluster.clone(),
                    "--cluster".to_string(),
                    format!("nats://127.0.0.1:{route_port}"),
                    "--routes".to_string(),
                    seat.routes.clone(),
                ]);
            }
            let child = command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nats-server (scripts/services.sh installs it)");
            let mut node = NatsNode {
                url: format!("nats://127.0.0.1:{port}"),
                child,
                store_dir,
            };
            loop {
                if let Ok(Some(status)) = node.child.try_wait() {
                    eprintln!("nats-server {name} exited at start ({status}); new ports");
                    break;
                }
                if answers_as_nats(port) && route_port.is_none_or(answers_as_nats) {
                    return node;
                }
                assert!(
                    Instant::now() < deadline,
                    "nats-server {name} did not start"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("nats-server {name} exited at start {START_ATTEMPTS} times");
    }

    /// A standalone JetStream server.
    pub fn start() -> NatsNode {
        NatsNode::spawn("solo", None)
    }

    /// Sends `signal` (`STOP`: the node hangs, like a frozen machine or a partition that
    /// drops packets, its connections open but silent; `CONT`: it resumes).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.clone()])
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal} {pid}");
    }

    /// SIGKILL, like a crashed machine.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NatsNode {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store_dir);
    }
}

/// Three clustered JetStream servers on loopback ports.
pub struct NatsCluster {
    /// The nodes, in start order.
    pub nodes: Vec<NatsNode>,
}

impl NatsCluster {
    /// Starts three nodes routed to each other.
    pub fn start() -> NatsCluster {
        let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let name = format!("tl{}", std::process::id());
        let nodes = cluster_ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let seat = ClusterSeat {
                    cluster: name.clone(),
                    route_port: *port,
                    routes: routes.clone(),
                };
                NatsNode::spawn(&format!("n{i}"), Some(&seat))
            })
            .collect();
        NatsCluster { nodes }
    }

    /// Every node's URL, comma-separated (as `--url` takes them).
    pub fn urls(&self) -> String {
        let urls: Vec<&str> = self.nodes.iter().map(|n| n.url.as_str()).collect();
        urls.join(",")
    }
}

/// A JetStream context on `url`.
pub async fn jetstream(url: &str) -> jetstream::Context {
    let client = async_nats::connect(url)
        .await
        .expect("connect to nats-server");
    jetstream::new(client)
}

/// Creates the stream `name` over `traqlyte.>` with `replicas` replicas, retrying while a
/// fresh cluster has no JetStream leader yet.
pub async fn create_stream(js: &jetstream::Context, name: &str, replicas: usize) {
    let deadline = Instant::now() + Duration::from_millis(START_WAIT_MS);
    loop {
        let config = stream::Config {
            name: name.to_string(),
            subjects: vec!["traqlyte.>".to_string()],
            num_replicas: replicas,
            ..stream::Config::default()
        };
        match js.create_stream(config).await {
            Ok(_) => return,
            Err(err) if Instant::now() < deadline => {
                eprintln!("stream not created yet: {err}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(err) => panic!("create stream {name}: {err}"),
        }
    }
}

/// Publishes `body` on `subject` with `Nats-Msg-Id: msg_id` and waits for JetStream's ack.
pub async fn publish(js: &jetstream::Context, subject: &str, body: &[u8], msg_id: &str) {
    publish_with(js, subject, body, msg_id, &[]).await;
}

/// [`publish`] with more headers.
pub async fn publish_with(
    js: &jetstream::Context,
    subject: &str,
    body: &[u8],
    msg_id: &str,
    extra: &[(&str, &str)],
) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    let deadline = Instant::now() + Duration::from_millis(START_WAIT_MS);
    // A publish during a leader election fails; a publisher retries with the same id.
    loop {
        let sent = js
            .publish_with_headers(subject.to_string(), headers.clone(), body.to_vec().into())
            .await;
        let acked = match sent {
            Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
            Err(err) => Err(err.to_string()),
        };
        match acked {
            Ok(()) => return,
            Err(err) if Instant::now() < deadline => {
                eprintln!("publish retried: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("publish {msg_id}: {err}"),
        }
    }
}

/// The harness itself: a node whose first route port is taken (as when another test took
/// a port picked free) starts on fresh ports instead of failing the test that needs it.
#[test]
fn a_node_whose_route_port_is_taken_starts_on_fresh_ports() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let port = taken.local_addr().expect("address").port();
    let seat = ClusterSeat {
        cluster: format!("tl_taken{}", std::process::id()),
        route_port: port,
        routes: format!("nats://127.0.0.1:{port}"),
    };
    let node = NatsNode::spawn("taken", Some(&seat));
    let client_port: u16 = node
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the URL");
    assert!(answers_as_nats(client_port));
    // The port stays the other holder's.
    assert_eq!(taken.local_addr().expect("address").port(), port);
}
