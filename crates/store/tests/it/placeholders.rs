//! The store writes SQL once, with `$N` placeholders, for both backends. SQLite takes
//! `$N` as a named parameter and sqlx's SQLite driver binds it by its number (as it does
//! `?N`), so no text is rewritten; these tests hold the driver to that.

use sqlx::SqliteConnection;

use crate::db::{Backend, Raw, TestDb};

async fn sqlite() -> (TestDb, SqliteConnection) {
    let db = TestDb::create(Backend::Sqlite).await;
    let Raw::Sqlite(conn) = db.raw().await else {
        unreachable!("a SQLite database")
    };
    (db, conn)
}

#[tokio::test]
async fn sqlite_binds_dollar_placeholders_by_number_in_any_order_and_repeated() {
    let (_db, mut conn) = sqlite().await;

    let row: (String, String, i64) = sqlx::query_as("SELECT $2 || $1, $1, $3 + $3")
        .bind("a")
        .bind("b")
        .bind(20_i64)
        .fetch_one(&mut conn)
        .await
        .expect("query");

    assert_eq!(row, ("ba".to_string(), "a".to_string(), 40));
}

#[tokio::test]
async fn sqlite_tells_dollar_ten_from_dollar_one() {
    let (_db, mut conn) = sqlite().await;
    let mut query = sqlx::query_as::<_, (i64, i64, i64)>("SELECT $10, $1, $11");
    for value in 1..=11_i64 {
        query = query.bind(value);
    }

    let row = query.fetch_one(&mut conn).await.expect("query");

    assert_eq!(row, (10, 1, 11));
}

#[tokio::test]
async fn sqlite_leaves_a_dollar_inside_a_string_literal_alone() {
    let (_db, mut conn) = sqlite().await;

    let row: (String, String) = sqlx::query_as("SELECT json_extract($1, '$.a'), '$1' || $2")
        .bind(r#"{"a": "x"}"#)
        .bind("y")
        .fetch_one(&mut conn)
        .await
        .expect("query");

    assert_eq!(row, ("x".to_string(), "$1y".to_string()));
}
