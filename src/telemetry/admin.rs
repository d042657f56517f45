//! The admin port: `/metrics` (OpenMetrics text), `/healthz` (the process serves), `/readyz` (this
//! replica can lead: it reached the API server and runs its election).

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

struct Admin {
    registry: Registry,
    health: Health,
}

async fn metrics(State(admin): State<Arc<Admin>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &admin.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        ),
        Err(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], "encoding failed".to_owned())
        }
    }
}

async fn ready(State(admin): State<Arc<Admin>>) -> StatusCode {
    if admin.health.is_ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

/// Serves the admin port until `shutdown` resolves.
pub async fn serve(
    address: SocketAddr,
    registry: Registry,
    health: Health,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let admin = Arc::new(Admin { registry, health });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(admin);
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
