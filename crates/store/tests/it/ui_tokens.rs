//! Web UI login links and sessions live their lifetime on the store's clock: no server
//! passes its own, so a link minted by one server and opened through another whose clock
//! differs lives exactly as long, and a server whose clock runs ahead cannot purge
//! another's live links.

use traqlyte_store::{TenantName, UiTokenKind};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(login_links_and_sessions_expire_on_the_stores_clock);

async fn login_links_and_sessions_expire_on_the_stores_clock(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let name = TenantName::parse("ui").expect("name");
    let (tenant, key) = store.create_tenant(&name).await.expect("tenant");
    let grant = store
        .ui_grant(&key)
        .await
        .expect("grant")
        .expect("a live key");
    let lifetime_us = 120_000_000;

    let before = store.clock_us().await.expect("clock");
    let (link, expires) = store
        .create_ui_token(&grant, UiTokenKind::Login, lifetime_us)
        .await
        .expect("link");
    let after = store.clock_us().await.expect("clock");
    assert!(
        (before + lifetime_us..=after + lifetime_us).contains(&expires),
        "the expiry is the store's time of minting plus the lifetime"
    );
    let (used, session) = store
        .exchange_ui_login_token(&link, lifetime_us)
        .await
        .expect("exchange")
        .expect("a live link");
    assert_eq!(used.tenant(), &tenant);
    assert_eq!(
        store
            .ui_token_tenant(&session, UiTokenKind::Session)
            .await
            .expect("session")
            .map(|t| t.id),
        Some(tenant.clone())
    );
    assert!(store
        .exchange_ui_login_token(&link, lifetime_us)
        .await
        .expect("exchange")
        .is_none());

    // Past its lifetime on the store's clock, a link is refused.
    let (stale, _) = store
        .create_ui_token(&grant, UiTokenKind::Login, lifetime_us)
        .await
        .expect("link");
    let (session, _) = store
        .create_ui_token(&grant, UiTokenKind::Session, lifetime_us)
        .await
        .expect("session");
    assert_eq!(
        store
            .ui_token_tenant(&session, UiTokenKind::Session)
            .await
            .expect("session")
            .map(|t| t.id),
        Some(tenant.clone())
    );
    db.raw()
        .await
        .execute(&format!(
            "UPDATE ui_tokens SET expires_at_us = expires_at_us - {}",
            lifetime_us + 1_000_000
        ))
        .await;
    assert!(store
        .exchange_ui_login_token(&stale, lifetime_us)
        .await
        .expect("exchange")
        .is_none());
    assert_eq!(
        store
            .ui_token_tenant(&session, UiTokenKind::Session)
            .await
            .expect("session")
            .map(|t| t.id),
        None
    );
}
