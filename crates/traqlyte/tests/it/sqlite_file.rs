//! The SQLite file deleted or replaced under a running server: its open connections would
//! go on writing into the old file, acknowledged, and the next start would open another.

use reqwest::StatusCode;

use crate::helpers::{checkout_event, spawn_app, Backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_deleted_or_replaced_under_the_server_takes_no_more_writes() {
    let app = spawn_app(Backend::Sqlite).await;
    app.register_checkout_contract().await;
    let stored = app.post_event(&checkout_event("order_1")).await;
    assert_eq!(stored.body["status"], "inserted", "{}", stored.body);
    let path = std::path::PathBuf::from(app.database_url());

    // Replaced: moved away and a copy put back at the path (a restore over a running
    // server): another inode.
    let aside = path.with_extension("aside");
    std::fs::rename(&path, &aside).expect("move the file away");
    std::fs::copy(&aside, &path).expect("copy it back");
    let refused = app.post_event(&checkout_event("order_2")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );
    assert_eq!(refused.code(), "database_unavailable", "{}", refused.body);
    let health = app.get("/healthz").await;
    assert_eq!(
        health.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        health.body
    );
    let message = health.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("deleted or replaced"), "{}", health.body);

    // Deleted: the same, and no reader makes a new empty file at the path.
    std::fs::remove_file(&path).expect("delete the file");
    let refused = app.post_event(&checkout_event("order_3")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );
    assert_eq!(
        app.get("/healthz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(
        !path.exists(),
        "a connection created a new file at the path"
    );
    let _ = std::fs::remove_file(&aside);
}
