//! The bare check-in service (`SnitchRuntime::check_in_service`, what the server's check-in
//! listener serves) against the check-in router it stands in for: the same requests,
//! hostile ones included, sent as raw bytes to both over loopback, get the same bytes
//! back (but the `date` header), and the check-ins they make are all recorded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use snitch::core::Token;
use snitch::prelude::{Case, CaseId, SnitchFields, SnitchRuntime, Storage};
use snitch::serve::{serve, ServeOptions};
use snitch::store::memory::MemoryStorage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `app` on a fresh loopback port until the test ends.
async fn serve_on_loopback<S>(app: S) -> SocketAddr
where
    S: tower::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(serve(
        listener,
        app,
        ServeOptions::default(),
        std::future::pending(),
    ));
    addr
}

/// Sends `request` whole, then reads the response until the server closes (every request
/// here asks it to): the response as its status line, its headers in name order (their
/// order means nothing) without `date` (the clock's), and every byte after them.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let mut headers: Vec<String> = lines
        .map(str::to_ascii_lowercase)
        .filter(|line| !line.starts_with("date:"))
        .collect();
    headers.sort();
    format!("{status}\n{}\n\n{body}", headers.join("\n"))
}

/// The check-ins counted so far (`snitch_check_ins_total`), by outcome.
async fn check_ins_counted(metrics: &axum::Router) -> BTreeMap<String, f64> {
    let request = axum::extract::Request::get("/metrics")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = tower::ServiceExt::oneshot(metrics.clone(), request)
        .await
        .expect("answered");
    let text = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("read");
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|line| line.starts_with("snitch_check_ins_total{"))
        .filter_map(|line| line.rsplit_once(' '))
        .map(|(series, value)| (series.to_owned(), value.parse().expect("a number")))
        .collect()
}

/// What each series grew by from `before` to `after`.
fn growth(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(series, n)| {
            (
                series.clone(),
                n - before.get(series).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, grown)| *grown != 0.0)
        .collect()
}

fn request(head: &str, body: &str) -> Vec<u8> {
    format!("{head}\r\nhost: snitch\r\nconnection: close\r\n\r\n{body}").into_bytes()
}

#[tokio::test]
async fn the_bare_service_answers_every_request_as_the_router_does() {
    let storage = Arc::new(MemoryStorage::new());
    let snitch = SnitchRuntime::builder(storage.clone())
        .build()
        .await
        .expect("starts");
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    storage.upsert_case(&case).await.expect("stored");
    let fields = SnitchFields {
        name: Some("nightly backup".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let made = snitch.service().create(&case, &fields).await.expect("made");
    let token = made.token().as_str().to_owned();

    let routed = serve_on_loopback(snitch.check_in_router().merge(snitch.health_router())).await;
    let bare = serve_on_loopback(snitch.check_in_service()).await;

    let too_long = "a".repeat(10_000);
    let over_the_limit = format!(
        "POST /{token} HTTP/1.1\r\ncontent-length: {}",
        snitch::http::CHECK_IN_OUTPUT_READ_MAX + 1
    );
    let cases: Vec<(String, String)> = vec![
        // Check-ins: each method, a query, a form body, an error exit status.
        (format!("GET /{token} HTTP/1.1"), String::new()),
        (format!("HEAD /{token} HTTP/1.1"), String::new()),
        (
            format!("GET /{token}?s=1&m=disk%20full HTTP/1.1"),
            String::new(),
        ),
        (
            format!(
                "POST /{token} HTTP/1.1\r\ncontent-type: application/x-www-form-urlencoded\r\n\
                 content-length: 22"
            ),
            "m=<b>done</b>&s=0&x=%00".to_owned(),
        ),
        (
            format!("POST /{token} HTTP/1.1\r\ntransfer-encoding: chunked"),
            "5\r\nm=hey\r\n0\r\n\r\n".to_owned(),
        ),
        (format!("GET /{token} HTTP/1.0"), String::new()),
        // Refused: other methods, a body over the limit, unknown or malformed tokens.
        (format!("PUT /{token} HTTP/1.1"), String::new()),
        (format!("DELETE /{token} HTTP/1.1"), String::new()),
        (over_the_limit, String::new()),
        (
            "GET /abcdefghijklmnopqrst HTTP/1.1".to_owned(),
            String::new(),
        ),
        ("GET /%00 HTTP/1.1".to_owned(), String::new()),
        ("GET /%FF%FE HTTP/1.1".to_owned(), String::new()),
        (format!("GET /{token}%2F HTTP/1.1"), String::new()),
        (format!("GET /{too_long} HTTP/1.1"), String::new()),
        // Other paths: none, deeper, a trailing slash, and the health checks.
        ("GET / HTTP/1.1".to_owned(), String::new()),
        (format!("GET /{token}/ HTTP/1.1"), String::new()),
        (format!("GET /{token}/events HTTP/1.1"), String::new()),
        ("GET //x HTTP/1.1".to_owned(), String::new()),
        (
            "POST /a/b HTTP/1.1\r\ncontent-length: 0".to_owned(),
            String::new(),
        ),
        ("GET /healthz HTTP/1.1".to_owned(), String::new()),
        ("GET /readyz HTTP/1.1".to_owned(), String::new()),
        (
            "POST /healthz HTTP/1.1\r\ncontent-length: 0".to_owned(),
            String::new(),
        ),
        ("HEAD /readyz HTTP/1.1".to_owned(), String::new()),
        // Request targets other than a path: absolute, asterisk and authority forms.
        (format!("GET http://snitch/{token} HTTP/1.1"), String::new()),
        ("OPTIONS * HTTP/1.1".to_owned(), String::new()),
        ("CONNECT snitch:443 HTTP/1.1".to_owned(), String::new()),
    ];
    let metrics = snitch.metrics_router();
    let mut accepted = 0;
    for (head, body) in &cases {
        let bytes = request(head, body);
        let before = check_ins_counted(&metrics).await;
        let from_router = exchange(routed, &bytes).await;
        let after_router = check_ins_counted(&metrics).await;
        let from_service = exchange(bare, &bytes).await;
        let after_service = check_ins_counted(&metrics).await;
        assert_eq!(from_service, from_router, "{head:?}");
        // Counted alike too (an unknown token, say, is counted; a path that is no
        // check-in's is not).
        assert_eq!(
            growth(&after_router, &after_service),
            growth(&before, &after_router),
            "{head:?}"
        );
        assert!(
            from_router.starts_with("HTTP/1."),
            "{head:?}: {from_router:?}"
        );
        if from_router.contains(" 202 ") {
            accepted += 2;
        }
    }
    // Seven check-ins, each sent to both, the pending snitch's first among them.
    assert_eq!(accepted, 14);
    let token = Token::parse(&token).expect("valid");
    let recorded = storage.check_ins(&token, 100).await.expect("read");
    assert_eq!(recorded.len(), accepted);
    snitch.shutdown().await;
}
