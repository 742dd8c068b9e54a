//! Rebuilds the crate when a migration file changes: `sqlx::migrate!` embeds the files
//! and their checksums at compile time, and Cargo does not know it reads them.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
