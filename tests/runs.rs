//! Runs over HTTP on every store (docs/rules.md#runs): the requests a job wrapper makes
//! (a start with a run id, the end with an exit status, a duration and the output as the
//! body), read back as the snitch's last run, its history and the output; a run that
//! never ends times out once; and hostile runs (a flood of starts, a NUL in the output,
//! bad parameters, an output far over the limit) lose nothing and break nothing.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use common::stores::{start_on, Store};
use common::{token_of, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};
use snitch::prelude::ManualClock;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a valid instant")
}

/// A check-in request at `path` under the check-in base (`/ping/<token>/start?rid=…`),
/// with `body` as `text/plain` when given; its status, `Ping-Body-Limit` and body.
async fn ping(server: &Server, path: &str, body: Option<Vec<u8>>) -> (StatusCode, String, String) {
    let url = format!("{}{path}", server.check_in_base.trim_end_matches('/'));
    let request = match body {
        Some(body) => server
            .client
            .post(url)
            .header("content-type", "text/plain")
            .body(body),
        None => server.client.get(url),
    };
    let response = request.send().await.expect("the check-in listener answers");
    let status = response.status();
    let limit = response
        .headers()
        .get("ping-body-limit")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, limit, response.text().await.expect("a body"))
}

async fn history(server: &Server, token: &str) -> Vec<Value> {
    let list = server
        .get_ok(&format!("/v1/snitches/{token}/check_ins"))
        .await;
    list.as_array().expect("an array").clone()
}

/// What runitor or `snitch run` sends: a start with a run id, then the end with the exit
/// status, its duration and the output tail as the body.
async fn a_wrapped_run_reads_back_with_its_duration_and_output(store: Store) {
    let clock = Arc::new(ManualClock::new(at("2026-11-23T01:59:30Z")));
    let (server, _kept) = start_on(store, clock.clone()).await;
    let snitch = server
        .create(json!({
            "name": "nightly backup",
            "schedule": "0 2 * * *",
            "timezone": "Europe/Riga",
            "max_runtime_seconds": 3600,
        }))
        .await;
    let token = token_of(&snitch);
    assert_eq!(snitch["max_runtime_seconds"], 3600);
    assert_eq!(snitch["running"], false);
    assert_eq!(snitch["last_run"], Value::Null);

    let rid = "5b7c1d2e-8f0a-4a53-9d2e-0c1b2a3d4e5f";
    let (status, limit, text) =
        ping(&server, &format!("/ping/{token}/start?rid={rid}"), None).await;
    assert_eq!(
        (status, limit.as_str(), text.as_str()),
        (StatusCode::OK, "10000", "OK")
    );
    let running = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(running["running"], true, "{store:?}: {running}");

    clock.set(at("2026-11-23T02:04:12Z"));
    let output = b"dumping db1\nwritten 4.2 GB\ndisk full\n".to_vec();
    let (status, ..) = ping(
        &server,
        &format!("/ping/{token}/3?rid={rid}&duration=282.25"),
        Some(output.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let ended = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(ended["status"], "errored", "{store:?}: {ended}");
    assert_eq!(ended["running"], false);
    assert_eq!(
        ended["last_run"],
        json!({
            "rid": rid,
            "started_at": "2026-11-23T01:59:30.000Z",
            "finished_at": "2026-11-23T02:04:12.000Z",
            "duration_ms": 282_250,
            "exit_status": "3",
            "timed_out": false,
        }),
        "{store:?}: the client's duration wins"
    );
    let list = history(&server, &token).await;
    assert_eq!(list.len(), 2, "{store:?}: {list:?}");
    assert_eq!(list[0]["kind"], "error");
    assert_eq!(list[0]["exit_status"], "3");
    assert_eq!(list[0]["run_id"], rid);
    assert_eq!(list[0]["duration_ms"], 282_250);
    assert_eq!(list[0]["has_body"], true);
    assert_eq!(list[1]["kind"], "start");
    assert_eq!(list[1]["has_body"], false);
    let id = list[0]["id"].as_u64().expect("a numbered check-in");
    let body = server
        .get(&format!("/v1/snitches/{token}/check_ins/{id}/body"))
        .await;
    assert_eq!(body.status(), StatusCode::OK);
    assert_eq!(
        common::content_type(&body),
        "text/plain; charset=utf-8",
        "{store:?}"
    );
    assert_eq!(
        body.headers()
            .get("x-content-type-options")
            .and_then(|v| v.to_str().ok()),
        Some("nosniff")
    );
    assert_eq!(body.bytes().await.expect("bytes").to_vec(), output);
    let start_id = list[1]["id"].as_u64().expect("numbered");
    for missing in [format!("{start_id}"), "0".into(), "999".into(), "x".into()] {
        let response = server
            .get(&format!("/v1/snitches/{token}/check_ins/{missing}/body"))
            .await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{missing}");
    }

    // The errored alert tells the run.
    let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    let errored = &events[0];
    assert_eq!(errored["type"], "snitch.errored", "{events}");
}

/// A run that starts and never ends times out once, at its maximum runtime, with reason
/// `timeout`; the next run that ends well brings the snitch back.
async fn a_hung_run_times_out_once(store: Store) {
    let clock = Arc::new(ManualClock::new(at("2026-11-23T00:00:00Z")));
    let (server, _kept) = start_on(store, clock.clone()).await;
    let snitch = server
        .create(json!({"name": "worker", "interval": "daily", "max_runtime_seconds": 600}))
        .await;
    let token = token_of(&snitch);
    server.check_in(&token, "").await;
    clock.set(at("2026-11-24T03:00:00Z"));
    let (status, ..) = ping(&server, &format!("/{token}/start"), None).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the DMS form keeps its answer"
    );
    server.tick_at(&clock, at("2026-11-24T03:09:59Z")).await;
    assert_eq!(server.status_of(&token).await, "healthy", "{store:?}");
    server.tick_at(&clock, at("2026-11-24T03:10:00Z")).await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "failed", "{store:?}: {snitch}");
    assert_eq!(snitch["running"], false);
    assert_eq!(snitch["last_run"]["timed_out"], true);
    assert_eq!(snitch["last_run"]["duration_ms"], 600_000);
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing"],
        "{store:?}"
    );
    server.tick_at(&clock, at("2026-11-24T12:00:00Z")).await;
    assert_eq!(server.event_types(&token).await.len(), 2, "{store:?}: once");

    clock.set(at("2026-11-25T03:00:00Z"));
    ping(&server, &format!("/{token}/start?rid=r2"), None).await;
    clock.set(at("2026-11-25T03:01:00Z"));
    ping(&server, &format!("/{token}/0?rid=r2"), None).await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "healthy", "{store:?}: {snitch}");
    assert_eq!(snitch["last_run"]["duration_ms"], 60_000);
}

/// Hostile runs: a flood of starts keeps at most 100 open; a NUL and invalid UTF-8 in
/// the output are kept as replacement characters; bad `rid` and `duration` are dropped,
/// not the check-in; an output far over the limit is cut, not refused; a log changes
/// nothing.
async fn hostile_runs_lose_nothing(store: Store) {
    let clock = Arc::new(ManualClock::new(at("2026-11-23T00:00:00Z")));
    let (server, _kept) = start_on(store, clock.clone()).await;
    let token = server.create_snitch("flood", "hourly").await;
    server.check_in(&token, "").await;
    for n in 0..105 {
        let (status, ..) = ping(&server, &format!("/ping/{token}/start?rid=r{n}"), None).await;
        assert_eq!(status, StatusCode::OK);
    }
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["running"], true);
    assert_eq!(
        snitch["last_run"]["rid"], "r4",
        "{store:?}: the oldest gave way: {snitch}"
    );

    let (status, ..) = ping(
        &server,
        &format!("/ping/{token}/log?rid=not%20valid&duration=-5"),
        Some(b"a\0b\xffc".to_vec()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "bad parameters never lose the check-in"
    );
    let list = history(&server, &token).await;
    assert_eq!(list[0]["kind"], "log");
    assert_eq!(list[0]["run_id"], Value::Null);
    assert_eq!(list[0]["duration_ms"], Value::Null);
    let id = list[0]["id"].as_u64().expect("numbered");
    let body = server
        .get(&format!("/v1/snitches/{token}/check_ins/{id}/body"))
        .await;
    assert_eq!(
        body.text().await.expect("text"),
        "a\u{FFFD}b\u{FFFD}c",
        "{store:?}"
    );
    assert_eq!(server.status_of(&token).await, "healthy");

    // Two megabytes of output: the first 10,000 bytes are kept, the check-in counts.
    let huge = vec![b'x'; 2 << 20];
    let (status, ..) = ping(&server, &format!("/ping/{token}"), Some(huge)).await;
    assert_eq!(status, StatusCode::OK, "{store:?}: never refused");
    let list = history(&server, &token).await;
    let id = list[0]["id"].as_u64().expect("numbered");
    let body = server
        .get(&format!("/v1/snitches/{token}/check_ins/{id}/body"))
        .await;
    assert_eq!(body.text().await.expect("text").len(), 10_000);
    // Past the read bound (16 MiB) the request is refused, with nothing recorded.
    let (status, ..) = ping(
        &server,
        &format!("/ping/{token}"),
        Some(vec![b'y'; 17 << 20]),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(history(&server, &token).await.len(), list.len());
}

/// The maximum runtime a snitch shows is the one in force, within the settable range,
/// and sending the snitch's own value back changes nothing: a default derived from a
/// year of grace, a monthly period, and a setting of 28 days all show the 72 hours every
/// run is held to.
async fn the_maximum_runtime_shown_is_in_force_and_can_be_sent_back(store: Store) {
    let clock = Arc::new(ManualClock::new(at("2026-11-23T00:00:00Z")));
    let (server, _kept) = start_on(store, clock.clone()).await;
    for (body, shown) in [
        (
            json!({"name": "yearly grace", "schedule": "0 2 * * *", "grace_seconds": 31_536_000}),
            259_200,
        ),
        (
            json!({"name": "monthly", "interval": "monthly", "max_runtime_seconds": 2_419_200}),
            259_200,
        ),
        (
            json!({"name": "short", "schedule": "*/5 * * * *", "grace_seconds": 120}),
            120,
        ),
        (
            json!({"name": "set", "interval": "daily", "max_runtime_seconds": 600}),
            600,
        ),
    ] {
        let snitch = server.create(body.clone()).await;
        assert_eq!(snitch["max_runtime_seconds"], shown, "{store:?}: {body}");
        let token = token_of(&snitch);
        let path = format!("/v1/snitches/{token}");
        let sent_back = json!({"max_runtime_seconds": snitch["max_runtime_seconds"]});
        let response = server.patch_json(&path, &sent_back).await;
        assert_eq!(response.status(), StatusCode::OK, "{store:?}: {body}");
        let after = server.get_ok(&path).await;
        assert_eq!(after["max_runtime_seconds"], shown, "{store:?}: {after}");
    }
}

/// Two servers on one PostgreSQL database: a run started on one ends on the other with
/// its duration; one that hangs, swept by both at its timeout, is announced once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_runs_and_announce_a_timeout_once() {
    let clock = Arc::new(ManualClock::new(at("2026-11-23T00:00:00Z")));
    let db = snitch_store_postgres::test_databases::empty(4).await;
    let top = format!(
        "{}{}database_url = {:?}\n",
        common::NO_RATE_LIMIT,
        common::MANUAL_TIME,
        db.url
    );
    let first = Server::launch(&top, &common::default_cases(), clock.clone()).await;
    let second = Server::launch(&top, &common::default_cases(), clock.clone()).await;
    let snitch = first
        .create(json!({"name": "worker", "interval": "daily", "max_runtime_seconds": 300}))
        .await;
    let token = token_of(&snitch);
    first.check_in(&token, "").await;
    clock.set(at("2026-11-24T01:00:00Z"));
    ping(&first, &format!("/ping/{token}/start?rid=a"), None).await;
    clock.set(at("2026-11-24T01:02:00Z"));
    ping(&second, &format!("/ping/{token}/0?rid=a"), None).await;
    let ended = second.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(ended["last_run"]["duration_ms"], 120_000, "{ended}");
    assert_eq!(ended["running"], false);

    ping(&second, &format!("/ping/{token}/start?rid=b"), None).await;
    let timeout = at("2026-11-24T01:07:00Z");
    clock.set(timeout);
    let (a, b) = tokio::join!(
        first.running.service.tick(timeout),
        second.running.service.tick(timeout)
    );
    a.expect("the first server's sweep");
    b.expect("the second server's sweep");
    assert_eq!(
        first.event_types(&token).await,
        ["snitch.reporting", "snitch.missing"],
        "one timeout, announced once"
    );
}

macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(Store::Memory).await;
            })*
        }
        mod sqlite {
            use super::*;
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(Store::Sqlite).await;
            })*
        }
        mod postgres {
            use super::*;
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(Store::Postgres).await;
            })*
        }
    };
}

on_every_store!(
    a_wrapped_run_reads_back_with_its_duration_and_output,
    a_hung_run_times_out_once,
    hostile_runs_lose_nothing,
    the_maximum_runtime_shown_is_in_force_and_can_be_sent_back,
);
