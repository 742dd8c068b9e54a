//! The reads behind a campaign report that the HTTP tests cannot reach at scale.

use traqlyte_store::{CampaignId, TenantName};

use crate::db::{on_both_backends, Backend, TestDb};

on_both_backends!(the_newest_duplicate_buckets_are_kept_when_the_cap_cuts);

const HOUR_US: i64 = 3_600_000_000;

/// Five hours of duplicates and room for three (hour, arm) rows: the three newest hours
/// are answered, oldest first, so a rising duplicate rate today is never cut off.
async fn the_newest_duplicate_buckets_are_kept_when_the_cap_cuts(backend: Backend) {
    let db = TestDb::create(backend).await;
    let store = db.store().await;
    store.migrate().await.expect("migrate");
    let name = TenantName::parse("buckets").expect("name");
    let (tenant, _) = store.create_tenant(&name).await.expect("tenant");
    let rows: Vec<String> = (0..5)
        .map(|hour| {
            format!(
                "('{}', 'cmp_1', 'as_{hour}', 'k', 'control', 0, 'm', NULL, 0, {})",
                tenant.as_str(),
                hour * HOUR_US + 1
            )
        })
        .collect();
    db.raw()
        .await
        .execute(&format!(
            "INSERT INTO outcome_duplicates VALUES {}",
            rows.join(", ")
        ))
        .await;
    let campaign = CampaignId::try_from("cmp_1").expect("campaign id");
    let buckets = store
        .duplicates_over_time(&tenant, &campaign, None, HOUR_US, 3)
        .await
        .expect("buckets");
    let starts: Vec<i64> = buckets.iter().map(|b| b.bucket_start_us).collect();
    assert_eq!(starts, vec![2 * HOUR_US, 3 * HOUR_US, 4 * HOUR_US]);
}
