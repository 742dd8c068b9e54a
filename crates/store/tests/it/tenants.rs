//! Reading every tenant, page by page, however many there are; naming a source whose
//! stored name can no longer be typed.

use traqlyte_store::{SourceName, TenantName};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(
    pages_of_tenant_ids_visit_every_tenant_once,
    a_source_stored_under_a_name_no_longer_typable_is_found_by_its_id
);

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

/// Names are normalised when parsed, so a source whose name was stored in another form
/// (before they were) cannot be named any more: the consumer's `--segment-source` finds
/// it by its id instead. A name that equals another source's id names that source.
async fn a_source_stored_under_a_name_no_longer_typable_is_found_by_its_id(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let tenant = TenantName::parse("t").expect("name");
    let (tenant, _) = store.create_tenant(&tenant).await.expect("tenant");
    let (old, _) = store
        .create_source(&tenant, &SourceName::parse("cafe").expect("name"))
        .await
        .expect("source");
    // As an older build stored it: decomposed.
    db.raw()
        .await
        .execute(&format!(
            "UPDATE sources SET name = 'cafe\u{301}' WHERE source_id = '{}'",
            old.source_id.as_str()
        ))
        .await;
    let by_id = SourceName::parse(old.source_id.as_str()).expect("an id parses as a name");
    let found = store
        .working_source(&tenant, &by_id)
        .await
        .expect("read")
        .expect("found by its id");
    assert_eq!(found.source_id, old.source_id);
    assert_eq!(found.name, "cafe\u{301}");
    // A source named like another's id is that name's source.
    let (named, _) = store
        .create_source(&tenant, &by_id)
        .await
        .expect("a source named like an id");
    let found = store
        .working_source(&tenant, &by_id)
        .await
        .expect("read")
        .expect("found");
    assert_eq!(found.source_id, named.source_id);
}
