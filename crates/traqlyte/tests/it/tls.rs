//! PostgreSQL over TLS: the URL's `sslmode` and `sslrootcert`, read as libpq reads them,
//! against a private cluster serving a self-signed certificate.

use std::process::Command;

use sqlx::Connection;
use traqlyte_store::{Store, StoreConfig};

use crate::fault::PrivatePostgres;

/// How the server sees the sessions named `application`: whether each is encrypted.
async fn sessions_encrypted(pg: &PrivatePostgres, application: &str) -> Vec<bool> {
    let admin_url = format!("{}?sslmode=disable", pg.url());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .expect("the private cluster answers");
    sqlx::query_scalar(
        "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = $1",
    )
    .bind(application)
    .fetch_all(&mut admin)
    .await
    .expect("pg_stat_ssl")
}

/// A self-signed certificate of another issuer than the cluster's.
fn another_root(dir: &std::path::Path) -> std::path::PathBuf {
    let (key, crt) = (dir.join("other.key"), dir.join("other.crt"));
    let output = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl must run");
    assert!(output.status.success(), "{output:?}");
    crt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_sessions_are_encrypted_and_verified_as_the_url_says() {
    let pg = PrivatePostgres::start_with_tls();
    let url = |application: &str, params: &str| {
        format!("{}?application_name={application}&{params}", pg.url())
    };
    let connect = |url: String| async move { Store::connect(&StoreConfig::new(url)).await };

    // verify-full: encrypted, the certificate checked against the given root and the
    // host name; the store works over it.
    let root = pg.certificate().display().to_string();
    let verified = connect(url(
        "tl_verified",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    ))
    .await
    .expect("verify-full against the cluster's own certificate connects");
    verified.migrate().await.expect("migrations run over TLS");
    let seen = sessions_encrypted(&pg, "tl_verified").await;
    assert!(!seen.is_empty() && seen.iter().all(|ssl| *ssl), "{seen:?}");

    // prefer: encrypted when the server offers TLS.
    let preferred = connect(url("tl_prefer", "sslmode=prefer"))
        .await
        .expect("sslmode=prefer connects");
    let seen = sessions_encrypted(&pg, "tl_prefer").await;
    assert!(!seen.is_empty() && seen.iter().all(|ssl| *ssl), "{seen:?}");

    // No sslmode: in the clear (TLS only when the URL asks for it, for now).
    let plain = connect(url("tl_plain", "connect_timeout=5"))
        .await
        .expect("the default connects");
    let seen = sessions_encrypted(&pg, "tl_plain").await;
    assert!(!seen.is_empty() && seen.iter().all(|ssl| !*ssl), "{seen:?}");

    // verify-full against a root that did not sign the server's certificate: refused,
    // saying why.
    let dir = std::env::temp_dir().join(format!(
        "traqlyte_tls_{}_{}",
        std::process::id(),
        traqlyte_store::now_us()
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let other = another_root(&dir).display().to_string();
    let refused = connect(url(
        "tl_other",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .await
    .err()
    .expect("an unknown issuer is refused");
    let said = refused.to_string().to_lowercase();
    assert!(
        said.contains("certificate") || said.contains("issuer"),
        "{said}"
    );
    assert!(sessions_encrypted(&pg, "tl_other").await.is_empty());

    for store in [verified, preferred, plain] {
        store.close().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
