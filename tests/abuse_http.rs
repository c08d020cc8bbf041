//! Hostile and overloading clients over real TCP (docs/rules.md#hostile-input
//! and #overload): partial headers, idle keep-alive connections, huge declared bodies,
//! slow bodies, more connections than the cap, malformed paths and wrong methods. Every
//! server here runs with short timeouts so that each test takes a few seconds at most.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use reqwest::header::ALLOW;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use snitch::core::clock::monotonic_now;
use snitch::prelude::{ManualClock, SnitchFields};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEADER_TIMEOUT: Duration = Duration::from_millis(300);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// Far beyond every timeout above: a test waiting this long has found a hang.
const HANG: Duration = Duration::from_secs(8);

/// A server with the short timeouts above and `extra` top-level settings.
async fn server(extra: &str) -> Server {
    let top = format!(
        "{NO_RATE_LIMIT}header_timeout_ms = {}\nrequest_timeout_ms = {}\n{extra}",
        HEADER_TIMEOUT.as_millis(),
        REQUEST_TIMEOUT.as_millis(),
    );
    Server::start_with(&top, &default_cases()).await
}

async fn connect(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    if !bytes.is_empty() {
        stream.write_all(bytes).await.expect("write");
    }
    stream
}

/// Everything the server sends until it closes the connection (a reset counts as a
/// close); panics if it is still open after [`HANG`].
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(HANG, read_all)
        .await
        .expect("the server closes the connection");
    String::from_utf8_lossy(&received).into_owned()
}

/// The body of a raw HTTP/1.1 response (after the blank line).
fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

fn basic_auth(key: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{key}:"))
    )
}

#[tokio::test]
async fn a_partial_or_missing_request_header_is_closed_after_the_header_timeout() {
    let server = server("").await;
    let addrs = [server.running.api_addr, server.running.check_in_addr];
    for addr in addrs {
        for sent in [&b"GET /v1/snitches HTTP/1.1\r\nHost: t\r\n"[..], b""] {
            let started = monotonic_now();
            let mut stream = connect(addr, sent).await;
            let answer = read_until_closed(&mut stream).await;
            let elapsed = started.elapsed();
            assert_eq!(answer, "", "closed without an answer");
            assert!(
                elapsed >= HEADER_TIMEOUT - Duration::from_millis(50),
                "{elapsed:?}"
            );
        }
    }
    // The server is unharmed.
    json_ok(server.get("/v1/snitches").await).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let server = server("").await;
    let request = b"GET /no-such-token HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut stream = connect(server.running.check_in_addr, request).await;
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    // One answer, then the idle connection was closed rather than kept forever.
    assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
}

#[tokio::test]
async fn a_huge_declared_length_without_a_body_is_413_at_once() {
    let server = server("").await;
    let request = format!(
        "POST /v1/snitches HTTP/1.1\r\nHost: t\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n",
        basic_auth(ACME_KEY)
    );
    let started = monotonic_now();
    let mut stream = connect(server.running.api_addr, request.as_bytes()).await;
    let answer = read_until_closed(&mut stream).await;
    // At once: a 408 would mean the server waited for the body.
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(started.elapsed() < HANG);
    let body: Value = serde_json::from_str(body_of(&answer)).expect("JSON body");
    assert_eq!(body["type"], "payload_too_large", "{body}");

    // Check-ins: the same, as text.
    let token = server.create_snitch("n", "daily").await;
    let request = format!(
        "POST /{token} HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 10000000000\r\n\r\nm=x"
    );
    let mut stream = connect(server.running.check_in_addr, request.as_bytes()).await;
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{answer}"
    );
    assert_eq!(server.status_of(&token).await, "pending", "not recorded");
}

/// The head of a raw HTTP/1.1 response, lowercased (before the blank line).
fn head_of(response: &str) -> String {
    response
        .split_once("\r\n\r\n")
        .map_or(response, |(head, _)| head)
        .to_ascii_lowercase()
}

/// docs/rules.md#request-parsing: an answer given before the request's body was read to
/// its end says `Connection: close` (a pooled client would otherwise send its next
/// request on a connection about to close), on the API and the check-in listener alike;
/// an answer that read the whole body keeps the connection open for the next request.
#[tokio::test]
async fn every_answer_that_leaves_a_body_unread_says_connection_close() {
    let server = server("").await;
    let token = server.create_snitch("n", "daily").await;
    let key = basic_auth(ACME_KEY);
    let api = server.running.api_addr;
    let check_ins = server.running.check_in_addr;
    // (listener, request head, declared length, status): a keep-alive request that sends
    // only the first kilobyte of its body.
    let cases = [
        (
            api,
            format!("POST /v1/snitches HTTP/1.1\r\nAuthorization: {key}"),
            70_000,
            "413",
        ),
        (api, "POST /v1/snitches HTTP/1.1".to_owned(), 2_000, "401"),
        (
            api,
            format!("POST /v1/nowhere HTTP/1.1\r\nAuthorization: {key}"),
            2_000,
            "404",
        ),
        (
            api,
            format!("PUT /v1/snitches HTTP/1.1\r\nAuthorization: {key}"),
            2_000,
            "405",
        ),
        (
            check_ins,
            format!("POST /{token} HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded"),
            70_000,
            "413",
        ),
        (
            check_ins,
            "POST /not-a-token HTTP/1.1".to_owned(),
            2_000,
            "404",
        ),
        (check_ins, format!("PUT /{token} HTTP/1.1"), 2_000, "405"),
        (check_ins, "POST /a/b/c/d HTTP/1.1".to_owned(), 2_000, "404"),
    ];
    for (addr, head, length, status) in cases {
        let request = format!(
            "{head}\r\nHost: t\r\nConnection: keep-alive\r\nContent-Length: {length}\r\n\r\n{}",
            "m".repeat(1_000)
        );
        let mut stream = connect(addr, request.as_bytes()).await;
        let answer = read_until_closed(&mut stream).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{head}: {answer}"
        );
        assert!(
            head_of(&answer).contains("\r\nconnection: close"),
            "{head} ({length} declared): {answer}"
        );
    }
    assert_eq!(
        server.status_of(&token).await,
        "pending",
        "nothing recorded"
    );

    // A body read to its end: the connection serves the next request.
    let body = "m=ok";
    let request = format!(
        "POST /{token} HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}GET /{token} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = connect(check_ins, request.as_bytes()).await;
    let answers = read_until_closed(&mut stream).await;
    assert_eq!(answers.matches("HTTP/1.1 202").count(), 2, "{answers}");
    assert!(
        !head_of(&answers).contains("connection: close"),
        "{answers}"
    );
}

#[tokio::test]
async fn a_slow_body_is_408_within_the_request_timeout() {
    let server = server("").await;
    let request = format!(
        "POST /v1/snitches HTTP/1.1\r\nHost: t\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\":",
        basic_auth(ACME_KEY)
    );
    let started = monotonic_now();
    let mut stream = connect(server.running.api_addr, request.as_bytes()).await;
    let answer = read_until_closed(&mut stream).await;
    let elapsed = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        elapsed >= REQUEST_TIMEOUT - Duration::from_millis(50),
        "{elapsed:?}"
    );
    let body: Value = serde_json::from_str(body_of(&answer)).expect("JSON body");
    assert_eq!(body["type"], "request_timeout", "{body}");
    assert_eq!(server.get_ok("/v1/snitches").await, json!([]));

    let token = server.create_snitch("n", "daily").await;
    let request = format!(
        "POST /{token} HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 100\r\n\r\nm=slow"
    );
    let mut stream = connect(server.running.check_in_addr, request.as_bytes()).await;
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{answer}"
    );
    assert_eq!(server.status_of(&token).await, "pending", "not recorded");
}

#[tokio::test]
async fn beyond_max_connections_new_connections_wait_and_are_served_later() {
    let server = server("max_connections = 20\n").await;
    let addr = server.running.check_in_addr;
    // Made and read through the service: an API request of this server must be read
    // within the short header timeout, which a machine busy with other tests can miss.
    let acme = server.case("acme").await;
    let service = &server.running.service;
    let fields = SnitchFields {
        name: Some("n".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let token = service.create(&acme, &fields).await.expect("created");
    let token = token.token().to_string();
    let started = monotonic_now();
    // 50 silent connections: 20 are accepted, 30 wait in the backlog.
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(connect(addr, b"").await);
    }
    let request = format!("GET /{token} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let mut waiting = connect(addr, request.as_bytes()).await;
    let answer = read_until_closed(&mut waiting).await;
    let elapsed = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    // Served only once idle connections were closed by the header timeout: the request
    // waited behind the cap.
    assert!(elapsed >= HEADER_TIMEOUT, "{elapsed:?}");
    let recorded = service.get(&acme, &token).await.expect("read");
    assert_eq!(recorded.status().as_str(), "healthy");
    // Every idle connection was accepted in turn and closed.
    for stream in &mut idle {
        assert_eq!(read_until_closed(stream).await, "");
    }
    // The other listener has its own cap and is unaffected throughout.
    json_ok(server.get("/v1/snitches").await).await;
}

#[tokio::test]
async fn malformed_paths_and_wrong_methods_get_clear_errors_over_http() {
    let server = server("").await;
    for path in [
        "/v1/snitches/%FF",
        "/v1/snitches/%C3%28/events",
        "/v1/webhooks/%80",
    ] {
        let response = send(server.request(Method::GET, path)).await;
        assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;
    }
    let response = send(server.client.get(server.check_in_url("%FF"))).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(content_type(&response).starts_with("text/plain"));

    let response = send(server.request(Method::PUT, "/v1/snitches")).await;
    assert_eq!(
        response
            .headers()
            .get(ALLOW)
            .map(|v| v.to_str().expect("ascii")),
        Some("GET,HEAD,POST")
    );
    assert_error(
        response,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;

    let big = json!({"name": "n", "interval": "daily", "notes": "x".repeat(64 * 1024)});
    let response = server.post_json("/v1/snitches", &big).await;
    assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
}

/// The check-in endpoint's fast paths (no body to collect, a token without `%` taken as
/// it is, no `Content-Length` set by the handler) answer as the slow ones do, on the
/// wire: 202 with the exact length, a percent-encoded token is the same snitch's, a form
/// body still carries the message, and an encoded byte that is no token is a 404.
#[tokio::test]
async fn check_ins_on_the_wire_have_their_length_and_decode_their_token() {
    let server = server("").await;
    let token = server.create_snitch("n", "daily").await;
    let encoded = format!("%{:02X}{}", token.as_bytes()[0], &token[1..]);
    let form = "m=from+the+body";
    let requests = [
        format!("GET /{token} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        format!("GET /{encoded}?m=encoded HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        format!(
            "POST /{token} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
    ];
    for request in &requests {
        let mut stream = connect(server.running.check_in_addr, request.as_bytes()).await;
        let response = read_until_closed(&mut stream).await;
        assert!(
            response.starts_with("HTTP/1.1 202 "),
            "{request}: {response}"
        );
        let head = response.to_ascii_lowercase();
        assert!(head.contains("\r\ncontent-length: 16\r\n"), "{response}");
        assert!(head.contains("\r\ncontent-type: text/plain"), "{response}");
        assert_eq!(body_of(&response), "Got it, thanks!\n");
    }
    let history = json_ok(server.get(&format!("/v1/snitches/{token}/check_ins")).await).await;
    let messages: Vec<&str> = history
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["message"].as_str().unwrap_or(""))
        .collect();
    // Newest first; the first request had no message.
    assert_eq!(messages, ["from the body", "encoded", ""]);

    let not_a_token = format!(
        "GET /%2F{} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        &token[1..]
    );
    let mut stream = connect(server.running.check_in_addr, not_a_token.as_bytes()).await;
    let response = read_until_closed(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 404 "), "{response}");
}

#[tokio::test]
async fn failed_authentication_is_rate_limited_per_client_address() {
    // The limiter reads the server's clock: time moves only when the test moves it.
    let clock = Arc::new(ManualClock::new(start_time()));
    let top = format!(
        "{NO_RATE_LIMIT}{MANUAL_TIME}auth_failures_per_minute = 1\nauth_failures_burst = 2\n"
    );
    let server = Server::launch(&top, &default_cases(), clock.clone()).await;
    let token = server.create_snitch("n", "daily").await;
    let wrong = "wrong-key-000000000000000000000000000";
    for _ in 0..2 {
        let response = send(server.request_as(wrong, Method::GET, "/v1/snitches")).await;
        assert_error(response, StatusCode::UNAUTHORIZED, "api_key_invalid").await;
    }
    let response = send(server.request_as(wrong, Method::GET, "/v1/snitches")).await;
    let retry_after = |response: &reqwest::Response| -> u64 {
        response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .expect("Retry-After")
            .to_str()
            .expect("ascii")
            .parse()
            .expect("whole seconds")
    };
    assert_eq!(retry_after(&response), 60);
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // While blocked, the address's correct key is refused too; check-ins are not limited.
    clock.advance(chrono::Duration::seconds(45));
    let response = server.get("/v1/snitches").await;
    assert_eq!(retry_after(&response), 15);
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    server.check_in(&token, "").await;
    // The block ends when the refill comes.
    clock.advance(chrono::Duration::seconds(15));
    json_ok(server.get("/v1/snitches").await).await;

    // Another address (127.0.0.2 is loopback too on Linux) has its own bucket.
    #[cfg(target_os = "linux")]
    {
        let other = reqwest::Client::builder()
            .local_address("127.0.0.2".parse::<std::net::IpAddr>().expect("address"))
            .build()
            .expect("client");
        let response = send(
            other
                .get(server.url("/v1/snitches"))
                .basic_auth(ACME_KEY, Some("")),
        )
        .await;
        json_ok(response).await;
    }
}

/// A message never refuses a check-in: request lines far beyond hyper's limits (64 KiB of
/// target, 400 KiB of head) are read, the check-in recorded with its message cut to 256
/// characters, on a keep-alive connection that goes on serving; beyond the listener's own
/// limit, a plain-text answer says what was too long.
#[tokio::test]
async fn a_long_message_never_refuses_a_check_in() {
    let server = server("").await;
    let token = server.create_snitch("n", "daily").await;
    let mut stream = connect(server.running.check_in_addr, b"").await;
    let mut expected = Vec::new();
    for (n, length) in [65_600usize, 1024 * 1024, 100].into_iter().enumerate() {
        // Percent-encoded 'é' (two bytes, six characters of request line each).
        let message = format!("{n}{}", "%C3%A9".repeat(length / 6));
        let request = format!("GET /{token}?s=0&m={message}&rid=x HTTP/1.1\r\nHost: t\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = vec![0u8; 4096];
        let mut got = 0;
        while !String::from_utf8_lossy(&response[..got]).contains("thanks!\n") {
            let read = tokio::time::timeout(HANG, stream.read(&mut response[got..]))
                .await
                .expect("an answer")
                .expect("read");
            assert!(
                read > 0,
                "closed after {length}: {:?}",
                String::from_utf8_lossy(&response[..got])
            );
            got += read;
        }
        let text = String::from_utf8_lossy(&response[..got]);
        assert!(text.starts_with("HTTP/1.1 202 "), "{length}: {text}");
        let cut: String = format!("{n}{}", "é".repeat(length / 6))
            .chars()
            .take(256)
            .collect();
        expected.push(cut);
    }
    let history = json_ok(server.get(&format!("/v1/snitches/{token}/check_ins")).await).await;
    let mut messages: Vec<String> = history
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["message"].as_str().unwrap_or("").to_owned())
        .collect();
    messages.reverse();
    assert_eq!(
        messages, expected,
        "each check-in recorded, its message cut"
    );

    // Beyond 2 MiB of request head: a plain-text 431 that says so.
    let request = format!(
        "GET /{token}?m={} HTTP/1.1\r\nHost: t\r\n\r\n",
        "a".repeat(snitch::serve::MAX_HEAD_BYTES + 10)
    );
    let mut stream = connect(server.running.check_in_addr, request.as_bytes()).await;
    let response = read_until_closed(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
    assert!(body_of(&response).contains("too long"), "{response}");
    // A path over the limit is no token: 414, in words.
    let request = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(70_000));
    let mut stream = connect(server.running.check_in_addr, request.as_bytes()).await;
    let response = read_until_closed(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 414 "), "{response}");
    assert!(
        body_of(&response).contains("path is too long"),
        "{response}"
    );
}
