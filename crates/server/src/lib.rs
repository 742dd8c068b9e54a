//! The HTTP API of TraqLyte (axum): authentication, contracts, JSON ingestion (single and
//! batch), stats and health. Every error, including the framework's own rejections, is
//! answered as `{"error":{"code","message","field"?}}`.
//!
//! Handlers parse at the edge ([`body`], [`auth`]), hand domain types to the identity core
//! and the store, and never write SQL. Main items: [`ServerConfig`], [`AppState`],
//! [`router`], [`serve`], [`ApiError`].

pub mod auth;
pub mod body;
mod config;
mod error;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use traqlyte_store::Store;

pub use config::ServerConfig;
pub use error::ApiError;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The store (cheap to clone: pools inside).
    pub store: Store,
    /// Limits and settings.
    pub config: Arc<ServerConfig>,
}

/// The whole API as a router.
pub fn router(state: AppState) -> Router {
    routes::router(state)
}

/// Binds `config.listen` and serves until `shutdown` completes. Calls `on_bound` with the
/// bound address (useful with port 0) before accepting connections.
pub async fn serve(
    store: Store,
    config: ServerConfig,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(&config.listen).await?;
    let address = listener.local_addr()?;
    on_bound(address);
    let app = router(AppState {
        store,
        config: Arc::new(config),
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
