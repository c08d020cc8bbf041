//! Check-ins under fire (docs/rules.md#trust-under-fire), over real TCP on both stores:
//! many workers sharing one check-in URL, a URL holder who flaps error and success to flood
//! alerts, and NUL bytes in every text a client can send.

mod common;

use std::any::Any;
use std::sync::Arc;

use common::stores::{store_config, Store};
use common::{
    assert_error, assert_invalid, default_cases, send, start_time, token_of, Server, MANUAL_TIME,
    NO_RATE_LIMIT,
};
use reqwest::{Method, StatusCode};
use serde_json::json;
use snitch::prelude::{ManualClock, SystemClock, Token};

/// A server on `store`, and what must outlive it (its database).
async fn start(store: Store, clock: Option<Arc<ManualClock>>) -> (Server, Box<dyn Any>) {
    let (top, kept) = store_config(store).await;
    let top = format!("{NO_RATE_LIMIT}{top}");
    let server = match clock {
        Some(clock) => {
            Server::launch(&format!("{top}{MANUAL_TIME}"), &default_cases(), clock).await
        }
        None => Server::launch(&top, &default_cases(), Arc::new(SystemClock)).await,
    };
    (server, kept)
}

/// `workers` clients check in to one token at once, `rounds` times each; every answer
/// must be 202. Gives the messages sent.
async fn hammer(server: &Server, token: &str, workers: usize, rounds: usize) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let client = server.client.clone();
        let url = server.check_in_url(token);
        tasks.spawn(async move {
            let mut sent = Vec::new();
            for r in 0..rounds {
                let message = format!("w{w}-r{r}");
                let response = send(client.get(&url).query(&[("m", &message)])).await;
                assert_eq!(
                    response.status(),
                    StatusCode::ACCEPTED,
                    "check-in {message}: {:?}",
                    response.text().await
                );
                sent.push(message);
            }
            sent
        });
    }
    let mut sent = Vec::new();
    while let Some(done) = tasks.join_next().await {
        sent.extend(done.expect("worker"));
    }
    sent.sort();
    sent
}

/// The messages of the snitch's kept check-ins, sorted.
async fn kept_messages(server: &Server, token: &str) -> Vec<String> {
    let token = Token::parse(token).expect("token");
    let kept = server
        .running
        .service
        .storage()
        .check_ins(&token, 1_000)
        .await
        .expect("read the history");
    let mut messages: Vec<String> = kept
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.as_str().to_owned()))
        .collect();
    messages.sort();
    messages
}

/// docs/rules.md#concurrency. A regression test: 64 connections on one token once gave 500s
/// on PostgreSQL and lost check-ins. Every one must be answered 202 and recorded.
async fn workers_sharing_one_url_are_all_answered_and_recorded(store: Store) {
    let (server, _db) = start(store, None).await;
    let token = server.create_snitch("shared queue worker", "hourly").await;

    // 64 at once, each recorded (64 fit in the kept history of 100).
    let sent = hammer(&server, &token, 64, 1).await;
    assert_eq!(kept_messages(&server, &token).await, sent);
    assert_eq!(server.event_types(&token).await, ["snitch.reporting"]);

    // A sustained flood: still only 202s, and the history holds the newest 100.
    hammer(&server, &token, 64, 10).await;
    assert_eq!(kept_messages(&server, &token).await.len(), 100);
    assert_eq!(server.status_of(&token).await, "healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_sharing_one_url_are_all_recorded_on_memory() {
    workers_sharing_one_url_are_all_answered_and_recorded(Store::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_sharing_one_url_are_all_recorded_on_postgres() {
    workers_sharing_one_url_are_all_answered_and_recorded(Store::Postgres).await;
}

/// docs/rules.md#alert-economy. A regression test: anyone holding a check-in URL could once
/// flap `?s=1` and plain check-ins and send tens of thousands of alerts. 1,000 flaps in one
/// period send one errored/reporting pair; the status still follows every check-in.
async fn flapping_sends_one_alert_pair_per_period(store: Store) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let (server, _db) = start(store, Some(clock.clone())).await;
    let token = server.create_snitch("flapper", "hourly").await;
    server.check_in(&token, "").await;
    for i in 0..1_000 {
        clock.advance(chrono::Duration::milliseconds(1_500));
        server.check_in(&token, "s=1").await;
        if i == 999 {
            assert_eq!(server.status_of(&token).await, "errored");
        }
        server.check_in(&token, "").await;
    }
    assert_eq!(server.status_of(&token).await, "healthy");
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.errored", "snitch.reporting"]
    );

    // The next period may alert again, once.
    clock.advance(chrono::Duration::hours(1));
    for _ in 0..10 {
        server.check_in(&token, "s=2").await;
        server.check_in(&token, "").await;
    }
    assert_eq!(
        server.event_types(&token).await,
        [
            "snitch.reporting",
            "snitch.errored",
            "snitch.reporting",
            "snitch.errored",
            "snitch.reporting"
        ]
    );
}

#[tokio::test]
async fn flapping_sends_one_alert_pair_per_period_on_memory() {
    flapping_sends_one_alert_pair_per_period(Store::Memory).await;
}

#[tokio::test]
async fn flapping_sends_one_alert_pair_per_period_on_postgres() {
    flapping_sends_one_alert_pair_per_period(Store::Postgres).await;
}

/// docs/rules.md#hostile-input. A regression test: NUL once gave 500s on PostgreSQL and
/// lost check-ins, while the memory store took it. Now both answer alike: 422 naming the
/// attribute for API text, 404 for ids, and check-ins recorded with U+FFFD.
async fn nul_bytes_get_the_same_clear_answers(store: Store) {
    let (server, _db) = start(store, None).await;
    let nul = "can't contain a NUL character";

    let response = server
        .post_json(
            "/v1/snitches",
            &json!({"name": "a\u{0}b", "interval": "daily", "tags": ["\u{0}"],
                    "notes": "\u{0}", "alert_email": ["x\u{0}@acme.test"]}),
        )
        .await;
    let problems = assert_invalid(response).await;
    for attribute in ["name", "tags", "notes", "alert_email"] {
        assert!(
            problems.contains(&(attribute.to_owned(), nul.to_owned())),
            "{attribute}: {problems:?}"
        );
    }

    let snitch = server
        .create(json!({"name": "nul target", "interval": "daily"}))
        .await;
    let token = token_of(&snitch);
    let path = format!("/v1/snitches/{token}");
    let problems = assert_invalid(server.patch_json(&path, &json!({"notes": "\u{0}"})).await).await;
    assert_eq!(problems, [("notes".to_owned(), nul.to_owned())]);
    let tags_path = format!("{path}/tags");
    let problems = assert_invalid(server.post_json(&tags_path, &json!(["\u{0}"])).await).await;
    assert_eq!(problems, [("tags".to_owned(), nul.to_owned())]);
    assert_invalid(server.get("/v1/snitches?tags=%00").await).await;
    let response = server.delete(&format!("{path}/tags/%00")).await;
    assert_eq!(response.status(), StatusCode::OK, "removing no tag");

    for (body, attribute) in [
        (json!({"url": "https://hooks.acme.test/\u{0}"}), "url"),
        (
            json!({"url": "https://hooks.acme.test/", "secret": "\u{0}"}),
            "secret",
        ),
    ] {
        let problems = assert_invalid(server.post_json("/v1/webhooks", &body).await).await;
        assert_eq!(problems, [(attribute.to_owned(), nul.to_owned())]);
    }
    let response = server.delete("/v1/webhooks/%00").await;
    assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;
    let response = server.get("/v1/snitches/%00").await;
    assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;

    // A check-in is never refused for its text.
    server.check_in(&token, "m=a%00b&s=%00").await;
    let response = send(
        server
            .client
            .request(Method::POST, server.check_in_url(&token))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("m=%00%00"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(
        kept_messages(&server, &token).await,
        ["a\u{FFFD}b", "\u{FFFD}\u{FFFD}"]
    );
    let response = send(server.client.get(server.check_in_url("%00"))).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(server.status_of(&token).await, "healthy");
}

#[tokio::test]
async fn nul_bytes_get_the_same_clear_answers_on_memory() {
    nul_bytes_get_the_same_clear_answers(Store::Memory).await;
}

#[tokio::test]
async fn nul_bytes_get_the_same_clear_answers_on_postgres() {
    nul_bytes_get_the_same_clear_answers(Store::Postgres).await;
}
