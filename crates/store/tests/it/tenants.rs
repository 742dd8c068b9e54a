//! Reading every tenant, page by page, however many there are.

use traqlyte_store::TenantName;

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(pages_of_tenant_ids_visit_every_tenant_once);

async fn pages_of_tenant_ids_visit_every_tenant_once(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let mut created = Vec::new();
    for name in ["a", "b", "c", "d", "e"] {
        let name = TenantName::parse(name).expect("name");
        created.push(store.create_tenant(&name).await.expect("tenant").0);
    }
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut after = None;
    loop {
        let page = store
            .tenant_ids_after(after.as_ref(), 2)
            .await
            .expect("page");
        assert!(page.len() <= 2);
        let Some(last) = page.last().cloned() else {
            break;
        };
        pages += 1;
        seen.extend(page);
        after = Some(last);
    }
    assert_eq!(pages, 3);
    let mut expected: Vec<&str> = created.iter().map(|t| t.as_str()).collect();
    expected.sort_unstable();
    let seen: Vec<&str> = seen.iter().map(|t| t.as_str()).collect();
    assert_eq!(seen, expected);
}
