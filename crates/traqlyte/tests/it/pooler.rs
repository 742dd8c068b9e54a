//! Behind PgBouncer, the pooler production deployments put in front of PostgreSQL: in
//! session pooling every command works; in transaction pooling (sessions shared between
//! clients) the server refuses to start, saying why, where it started at random and then
//! answered valid keys `401` and most requests `500`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{Backend, TestDb};

/// A private `pgbouncer` on a free loopback port in front of the shared PostgreSQL,
/// killed when dropped.
struct Bouncer {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Bouncer {
    /// Starts one in `pool_mode` (`session` or `transaction`), on fresh ports again when
    /// it exits at once (a port picked free was taken meanwhile).
    fn start(pool_mode: &str) -> Bouncer {
        for _ in 0..5 {
            let port = {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
                listener.local_addr().expect("address").port()
            };
            let dir = std::env::temp_dir().join(format!(
                "traqlyte_it_pgbouncer_{}_{port}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("a directory");
            std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("auth file");
            let ini = dir.join("pgbouncer.ini");
            std::fs::write(
                &ini,
                format!(
                    "[databases]\n* = host=127.0.0.1 port=5432\n\n[pgbouncer]\n\
                     listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                     auth_type = trust\nauth_file = {}\npool_mode = {pool_mode}\n\
                     default_pool_size = 4\nignore_startup_parameters = extra_float_digits\n\
                     logfile =\npidfile =\n",
                    dir.join("users.txt").display()
                ),
            )
            .expect("ini file");
            set_readable(&dir);
            // PgBouncer refuses to run as root.
            // Debian's package puts it in /usr/sbin, which a user's PATH may lack.
            let program = if std::path::Path::new("/usr/sbin/pgbouncer").exists() {
                "/usr/sbin/pgbouncer"
            } else {
                "pgbouncer"
            };
            // `setpriv` execs pgbouncer in its own process (`runuser` forks, and killing
            // it left pgbouncer running), so dropping the child ends the pooler.
            let mut command = if is_root() {
                let mut command = Command::new("setpriv");
                command.args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    program,
                ]);
                command
            } else {
                Command::new(program)
            };
            let child = command
                .arg(&ini)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start pgbouncer (scripts/services.sh installs it)");
            let mut bouncer = Bouncer { port, child, dir };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(_)) = bouncer.child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return bouncer;
                }
                assert!(Instant::now() < deadline, "pgbouncer did not start");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("pgbouncer exited at start 5 times");
    }

    /// `url` (a database of the shared PostgreSQL) reached through this pooler.
    fn url(&self, url: &str) -> String {
        url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port))
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// The pooler's files readable by the user it runs as.
fn set_readable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    for entry in std::fs::read_dir(dir)
        .expect("read the directory")
        .flatten()
    {
        let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644));
    }
}

fn traqlyte(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_traqlyte"))
        .args(args)
        .output()
        .expect("run traqlyte")
}

#[tokio::test]
async fn transaction_pooling_is_refused_at_start_and_session_pooling_works() {
    let db = TestDb::create(Backend::Postgres).await;

    let shared = Bouncer::start("transaction");
    let url = shared.url(&db.url);
    for args in [
        vec!["migrate", "--database-url", url.as_str()],
        vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            url.as_str(),
        ],
    ] {
        let refused = traqlyte(&args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{args:?} started: {stderr}");
        assert!(
            stderr.contains("shares PostgreSQL sessions") && stderr.contains("pool_mode = session"),
            "{args:?}: {stderr}"
        );
    }
    drop(shared);

    let own = Bouncer::start("session");
    let url = own.url(&db.url);
    let migrated = traqlyte(&["migrate", "--database-url", &url]);
    assert!(migrated.status.success(), "{migrated:?}");
    let created = traqlyte(&["tenant", "create", "pooled", "--database-url", &url]);
    assert!(created.status.success(), "{created:?}");
    let listed = traqlyte(&["tenant", "list", "--database-url", &url]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("pooled"),
        "{listed:?}"
    );
}
