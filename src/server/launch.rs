//! Starting the server: the runtime over the configured store, the two listeners, and the
//! graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use snitch_core::{Clock, SnitchService, SystemClock};
use snitch_http::{ApiError, ApiState};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::util::Either;
use tower_http::trace::TraceLayer;

use super::bootstrap::{load_cases, open_storage};
use super::{Config, ServerError};
use crate::serve::{fitting_max_connections, raise_fd_limit, serve, with_request_timeout};

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// Where check-ins are received.
    pub check_in_addr: SocketAddr,
    /// Where `GET /metrics` is served (`metrics_listen`), if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Where check-ins by e-mail are received (`email_listen`), if anywhere.
    pub email_addr: Option<SocketAddr>,
    /// The key of the `demo` case made when no case is configured: shown once.
    pub demo_key: Option<String>,
    /// The service, for operations without HTTP.
    pub service: SnitchService,
    api: ApiState,
    task: JoinHandle<Result<(), std::io::Error>>,
}

impl Running {
    /// Switches the API's maintenance mode (503 for every API call; check-ins keep
    /// working) while the server runs.
    pub fn set_maintenance(&self, on: bool) {
        self.api.set_maintenance(on);
    }

    /// Waits until the server has shut down and every accepted request was answered.
    pub async fn wait(self) -> Result<(), ServerError> {
        match self.task.await {
            Ok(result) => Ok(result?),
            Err(join) => Err(ServerError::Io(std::io::Error::other(join))),
        }
    }
}

/// Starts the API on `api` and check-ins on `check_in`, with the deadline scheduler, until
/// `shutdown` completes; then stops accepting, finishes in-flight requests and returns.
pub async fn launch(
    config: Config,
    api: TcpListener,
    check_in: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServerError> {
    launch_with_clock(config, api, check_in, Arc::new(SystemClock), shutdown).await
}

/// Whether the subscriber installed now wants `TraceLayer`'s request spans
/// (`RUST_LOG=tower_http=debug`): otherwise the layer would cost every request its time
/// and record nothing (failures are logged by the HTTP crate itself).
fn request_spans_wanted() -> bool {
    tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG)
}

/// The router with `TraceLayer`'s request spans, when they are wanted
/// ([`request_spans_wanted`]).
///
/// Spans name the route template, never the URI: a check-in URL is a secret.
fn traced(router: axum::Router) -> axum::Router {
    if request_spans_wanted() {
        router.layer(TraceLayer::new_for_http().make_span_with(
            |req: &axum::http::Request<axum::body::Body>| {
                let route = req
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map_or("unmatched", axum::extract::MatchedPath::as_str);
                tracing::debug_span!("request", method = %req.method(), route)
            },
        ))
    } else {
        router
    }
}

/// [`launch`] with a chosen clock (tests use a [`snitch_core::ManualClock`]).
pub async fn launch_with_clock(
    config: Config,
    api: TcpListener,
    check_in: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServerError> {
    let storage = open_storage(&config).await?;
    let snitch = config.snitch_builder(storage).clock(clock).build().await?;
    let demo_key = match load_cases(&config, snitch.service(), snitch.keys()).await {
        Ok(demo_key) => demo_key,
        Err(e) => {
            snitch.shutdown().await;
            return Err(e);
        }
    };
    if let Err(e) = snitch.keys().refresh().await {
        snitch.shutdown().await;
        return Err(e.into());
    }

    let api_router = snitch.api_router().merge(snitch.health_router());
    // The dashboard shares the API's listener, under `/ui/`.
    #[cfg(feature = "ui")]
    let api_router = if config.ui {
        api_router.merge(snitch.ui_router())
    } else {
        api_router
    };
    #[cfg(not(feature = "ui"))]
    if config.ui {
        tracing::info!("built without the `ui` feature: no dashboard is served");
    }
    let api_app = with_request_timeout(traced(api_router), config.request_timeout(), || {
        ApiError::request_timeout().into_response()
    });
    // The listener serves check-ins alone: the bare service, unless request spans are
    // wanted (the router's `TraceLayer`, with the matched route in each span).
    let check_ins = if request_spans_wanted() {
        Either::Left(traced(
            snitch.check_in_router().merge(snitch.health_router()),
        ))
    } else {
        Either::Right(snitch.check_in_service())
    };
    let check_in_app =
        with_request_timeout(check_ins, config.request_timeout(), request_timeout_text);

    // Bound before anything is served, so a taken address fails the start.
    let metrics_listener = match config.metrics_listen {
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                snitch.shutdown().await;
                return Err(ServerError::Config(format!(
                    "metrics_listen {addr} cannot be bound: {e}"
                )));
            }
        },
        None => None,
    };
    #[cfg(feature = "email-check-ins")]
    let email = match (config.email_listen, config.email_options()) {
        (_, Err(e)) => {
            snitch.shutdown().await;
            return Err(e);
        }
        (Some(addr), Ok(Some(options))) => match TcpListener::bind(addr).await {
            Ok(listener) => Some((listener, options)),
            Err(e) => {
                snitch.shutdown().await;
                return Err(ServerError::Config(format!(
                    "email_listen {addr} cannot be bound: {e}"
                )));
            }
        },
        _ => None,
    };
    #[cfg(feature = "email-check-ins")]
    let email_addr = email
        .as_ref()
        .map(|(listener, _)| listener.local_addr())
        .transpose()?;
    #[cfg(not(feature = "email-check-ins"))]
    let email_addr = None;
    let metrics_addr = metrics_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let api_addr = api.local_addr()?;
    let check_in_addr = check_in.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut options = config.serve_options();
    let fd_limit = raise_fd_limit();
    options.max_connections = fitting_max_connections(options.max_connections, 2, fd_limit);
    if options.max_connections < config.max_connections {
        // Expected on a default start under a small file limit; a warning only when the
        // operator asked for more than the machine allows.
        if config.max_connections == crate::serve::DEFAULT_MAX_CONNECTIONS {
            tracing::info!(
                used = options.max_connections,
                fd_limit,
                "max_connections set to fit the limit of open files"
            );
        } else {
            tracing::warn!(
                configured = config.max_connections,
                used = options.max_connections,
                fd_limit,
                "max_connections lowered to fit the limit of open files"
            );
        }
    }
    let api_server = tokio::spawn(serve(api, api_app, options, stopped(stop_rx.clone())));
    let check_in_server = tokio::spawn(serve(
        check_in,
        check_in_app,
        options
            .with_connect_info(false)
            .with_long_request_lines(true),
        stopped(stop_rx.clone()),
    ));
    let metrics_server = metrics_listener.map(|listener| {
        let app = with_request_timeout(
            snitch.metrics_router().merge(snitch.health_router()),
            config.request_timeout(),
            request_timeout_text,
        );
        // Operators only: a few connections are plenty.
        let mut metrics_options = options;
        metrics_options.max_connections = options.max_connections.min(64);
        tokio::spawn(serve(
            listener,
            app,
            metrics_options,
            stopped(stop_rx.clone()),
        ))
    });

    #[cfg(feature = "email-check-ins")]
    let email_server = email.map(|(listener, options)| {
        let listener_of_mail =
            snitch_email_in::EmailCheckIns::new(snitch.service().clone(), options)
                .with_metrics(snitch.metrics().clone());
        tokio::spawn(listener_of_mail.serve(listener, stopped(stop_rx.clone())))
    });
    #[cfg(not(feature = "email-check-ins"))]
    let email_server: Option<JoinHandle<std::io::Result<()>>> = None;

    let service = snitch.service().clone();
    let api_state = snitch.api_state_for_launch();
    let task = tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: finishing requests in flight");
        let _ = stop_tx.send(true);
        let mut results = vec![api_server.await, check_in_server.await];
        if let Some(server) = metrics_server {
            results.push(server.await);
        }
        if let Some(server) = email_server {
            results.push(server.await);
        }
        // The scheduler, the dispatcher (deliveries in flight are recorded) and the key
        // refresh stop; the clean stop is recorded.
        snitch.shutdown().await;
        for result in results {
            result.map_err(std::io::Error::other)??;
        }
        tracing::info!("stopped");
        Ok(())
    });

    Ok(Running {
        api_addr,
        check_in_addr,
        metrics_addr,
        email_addr,
        demo_key,
        service,
        api: api_state,
        task,
    })
}

/// The check-in listener's 408: text, like its other answers.
fn request_timeout_text() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request was not complete in time.\n",
    )
        .into_response()
}
