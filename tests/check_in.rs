//! Black-box tests of the check-in endpoint (docs/rules.md#check-ins) and of what
//! check-ins and missed deadlines do to a snitch (#state-machine), against a real server.

mod common;

use std::sync::Arc;

use chrono::Duration;
use common::*;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use snitch::core::CheckIn;
use snitch::prelude::{Clock, ManualClock, Outcome};

/// The stored check-ins of an `acme` snitch, newest first.
async fn check_ins(server: &Server, token: &str) -> Vec<CheckIn> {
    let case = server.case("acme").await;
    server
        .running
        .service
        .check_ins(&case, token, 10)
        .await
        .expect("check-ins")
}

fn message(check_in: &CheckIn) -> Option<&str> {
    check_in.message.as_ref().map(|m| m.as_str())
}

#[tokio::test]
async fn get_post_and_head_answer_202_got_it_thanks() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let url = server.check_in_url(&token);

    for method in [Method::GET, Method::POST, Method::HEAD] {
        let response = send(server.client.request(method.clone(), &url)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{method}");
        let ctype = content_type(&response);
        assert!(ctype.starts_with("text/plain"), "{method}: {ctype}");
        let body = response.text().await.expect("body");
        if method == Method::HEAD {
            assert_eq!(body, "", "HEAD has no body");
        } else {
            assert_eq!(body, "Got it, thanks!\n", "{method}");
        }
    }
    // Every one was recorded, and needed no credentials.
    assert_eq!(check_ins(&server, &token).await.len(), 3);
    assert_eq!(server.status_of(&token).await, "healthy");

    // The URL the API shows is the one that works.
    let shown = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(shown["check_in_url"], url);
}

#[tokio::test]
async fn unknown_tokens_are_404_text_plain() {
    let server = Server::start().await;
    for path in ["abcdefghij0123456789", "short", "NOT-A-TOKEN", "a/b"] {
        let url = format!("{}/{path}", server.check_in_base);
        for method in [Method::GET, Method::POST] {
            let response = send(server.client.request(method.clone(), &url)).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
            let ctype = content_type(&response);
            assert!(ctype.starts_with("text/plain"), "{path}: {ctype}");
            let body = response.text().await.expect("body");
            assert!(
                !body.is_empty() && body.len() < 200,
                "short message: {body:?}"
            );
        }
    }
    let response = send(
        server
            .client
            .head(format!("{}/abcdefghij0123456789", server.check_in_base)),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_message_comes_from_the_query_or_a_form_body() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let url = server.check_in_url(&token);

    server.check_in(&token, "m=from+the%20query").await;
    let form = server
        .client
        .post(&url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("m=from+the+body%21");
    assert_eq!(send(form).await.status(), StatusCode::ACCEPTED);
    let form_with_charset = server
        .client
        .post(format!("{url}?m=query+loses"))
        .header(
            CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=UTF-8",
        )
        .body("m=body+wins");
    assert_eq!(send(form_with_charset).await.status(), StatusCode::ACCEPTED);
    // A POST with a query and no form body.
    let plain = server.client.post(format!("{url}?m=posted+query"));
    assert_eq!(send(plain).await.status(), StatusCode::ACCEPTED);
    // No message.
    server.check_in(&token, "").await;

    let stored = check_ins(&server, &token).await;
    let messages: Vec<_> = stored.iter().map(message).collect();
    assert_eq!(
        messages,
        [
            None,
            Some("posted query"),
            Some("body wins"),
            Some("from the body!"),
            Some("from the query"),
        ]
    );
    assert!(stored.iter().all(|c| c.outcome == Outcome::Success));
}

#[tokio::test]
async fn long_messages_are_truncated_to_256_characters_not_refused() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let long = "é".repeat(300);
    let url = format!("{}?m={}", server.check_in_url(&token), "%C3%A9".repeat(300));
    let response = send(server.client.get(url)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(response.text().await.expect("body"), "Got it, thanks!\n");

    let form = server
        .client
        .post(server.check_in_url(&token))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("m={}", "a".repeat(5_000)));
    assert_eq!(send(form).await.status(), StatusCode::ACCEPTED);

    let stored = check_ins(&server, &token).await;
    assert_eq!(message(&stored[0]), Some("a".repeat(256).as_str()));
    let first = message(&stored[1]).expect("message");
    assert_eq!(first.chars().count(), 256);
    assert!(long.starts_with(first));
}

#[tokio::test]
async fn s_1_makes_the_snitch_errored_while_0_and_empty_are_success() {
    let server = Server::start().await;
    let errored = server.create_snitch("errored", "daily").await;
    let zero = server.create_snitch("zero", "daily").await;
    let empty = server.create_snitch("empty", "daily").await;

    server.check_in(&errored, "s=1&m=disk+full").await;
    let snitch = server.get_ok(&format!("/v1/snitches/{errored}")).await;
    assert_eq!(snitch["status"], "errored");
    // checked_in_at holds successful check-ins only.
    assert_eq!(snitch["checked_in_at"], Value::Null);
    let stored = check_ins(&server, &errored).await;
    assert_eq!(
        stored[0].outcome,
        Outcome::Error {
            exit_status: "1".into()
        }
    );
    assert_eq!(message(&stored[0]), Some("disk full"));
    assert_eq!(server.event_types(&errored).await, ["snitch.errored"]);

    server.check_in(&zero, "s=0").await;
    server.check_in(&empty, "s=").await;
    for token in [&zero, &empty] {
        let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
        assert_eq!(snitch["status"], "healthy", "{token}");
        assert!(is_wire_time(snitch["checked_in_at"].as_str().expect("set")));
        assert_eq!(check_ins(&server, token).await[0].outcome, Outcome::Success);
        assert_eq!(server.event_types(token).await, ["snitch.reporting"]);
    }

    // The exit status may come from a form body too; a success after an error reports.
    let form = server
        .client
        .post(server.check_in_url(&zero))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("s=2");
    assert_eq!(send(form).await.status(), StatusCode::ACCEPTED);
    assert_eq!(server.status_of(&zero).await, "errored");
    server.check_in(&zero, "").await;
    assert_eq!(server.status_of(&zero).await, "healthy");
    assert_eq!(
        server.event_types(&zero).await,
        ["snitch.reporting", "snitch.errored", "snitch.reporting"]
    );
}

#[tokio::test]
async fn without_error_notices_an_error_check_in_counts_as_success() {
    let cases = r#"
[[case]]
name = "acme"
error_notices = false
api_keys = ["acme-key-0000000000000000000000000001"]
"#;
    let server = Server::start_with(NO_RATE_LIMIT, cases).await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "s=1").await;
    assert_eq!(server.status_of(&token).await, "healthy");
    assert_eq!(server.event_types(&token).await, ["snitch.reporting"]);
}

#[tokio::test]
async fn a_missed_deadline_fails_the_snitch_and_emits_snitch_missing() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("hourly job", "hourly").await;
    let pending = server.create_snitch("never checks in", "hourly").await;
    let path = format!("/v1/snitches/{token}");

    // 03:00:00.123: inside [03:00, 04:00), so due by 05:00.
    server.check_in(&token, "").await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "healthy");
    assert_eq!(snitch["deadline_at"], "2026-11-22T05:00:00.000Z");

    // Just before the deadline nothing happens.
    server.tick_at(&clock, at("2026-11-22T04:59:59.999Z")).await;
    assert_eq!(server.status_of(&token).await, "healthy");

    server.tick_at(&clock, at("2026-11-22T05:00:00.000Z")).await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "failed");
    assert_eq!(snitch["checked_in_at"], "2026-11-22T03:00:00.123Z");
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing"]
    );
    let case = server.case("acme").await;
    let events = server
        .running
        .service
        .events(&case, &token, 1)
        .await
        .expect("events");
    assert_eq!(events[0].status.webhook_name(), "missing");
    assert_eq!(events[0].previous_status.webhook_name(), "healthy");

    // Another silent hour: another snitch.missing, previous_status missing.
    server.tick_at(&clock, at("2026-11-22T06:00:00.000Z")).await;
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing", "snitch.missing"]
    );
    let events = server
        .running
        .service
        .events(&case, &token, 1)
        .await
        .expect("events");
    assert_eq!(events[0].previous_status.webhook_name(), "missing");

    // A check-in brings it back with snitch.reporting.
    clock.advance(Duration::minutes(5));
    server.check_in(&token, "").await;
    assert_eq!(server.status_of(&token).await, "healthy");
    assert_eq!(
        server.event_types(&token).await.last().map(String::as_str),
        Some("snitch.reporting")
    );

    // A pending snitch never fails.
    assert_eq!(server.status_of(&pending).await, "pending");
    assert!(server.event_types(&pending).await.is_empty());
}

#[tokio::test]
async fn the_scheduler_notices_a_missed_deadline_by_itself() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "hourly").await;
    server.check_in(&token, "").await;
    // Due by 05:00; half a minute later exactly one period has ended without a check-in.
    clock.set(at("2026-11-22T05:00:30.000Z"));

    // The scheduler sweeps at least once a second; poll, bounded.
    let deadline = snitch::core::clock::monotonic_now() + std::time::Duration::from_secs(10);
    loop {
        if server.status_of(&token).await == "failed" {
            break;
        }
        assert!(
            snitch::core::clock::monotonic_now() < deadline,
            "not swept in 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing"]
    );
}

#[tokio::test]
async fn a_paused_snitch_sends_no_missing_alerts() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "hourly").await;
    server.check_in(&token, "").await;
    let response = server
        .post_json(
            &format!("/v1/snitches/{token}/pause"),
            &json!({"until": "unpaused"}),
        )
        .await;
    assert_no_content(response).await;
    clock.advance(Duration::days(2));
    server
        .running
        .service
        .tick(clock.now())
        .await
        .expect("tick");
    assert_eq!(server.status_of(&token).await, "paused");
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.paused"]
    );
}

#[tokio::test]
async fn a_deleted_snitchs_check_in_url_answers_404() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    assert_no_content(server.delete(&format!("/v1/snitches/{token}")).await).await;
    let response = send(server.client.get(server.check_in_url(&token))).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(content_type(&response).starts_with("text/plain"));
}

#[tokio::test]
async fn each_silent_period_of_a_failed_snitch_emits_one_more_missing() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "5_minute").await;
    // 03:00:00.123, in [03:00, 03:05): due by 03:10; then one miss per 5 minutes.
    server.check_in(&token, "").await;
    server.tick_at(&clock, at("2026-11-22T03:27:00.000Z")).await;
    // Periods ending 03:10, 03:15, 03:20 and 03:25 had no check-in: caught up at once,
    // they are one snitch.missing counting them (docs/rules.md#catch-up).
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing"]
    );
    let case = server.active_case("acme").await;
    let events = server
        .running
        .service
        .events(&case, &token, 1)
        .await
        .expect("events");
    assert_eq!(events[0].missed_periods, 4);
    assert_eq!(events[0].at, at("2026-11-22T03:25:00Z"));
    server.tick_at(&clock, at("2026-11-22T03:30:00.000Z")).await;
    assert_eq!(server.event_types(&token).await.len(), 3, "one more period");
    // A second sweep at the same instant adds nothing.
    server
        .running
        .service
        .tick(clock.now())
        .await
        .expect("tick");
    assert_eq!(server.event_types(&token).await.len(), 3);
    assert_eq!(server.status_of(&token).await, "failed");
}

#[tokio::test]
async fn at_most_one_errored_alert_per_period() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "hourly").await;
    server.check_in(&token, "s=1").await;
    clock.advance(Duration::minutes(10));
    server.check_in(&token, "s=2").await;
    assert_eq!(server.event_types(&token).await, ["snitch.errored"]);
    // Both were recorded, and they satisfy the period: no missing at 05:00.
    assert_eq!(check_ins(&server, &token).await.len(), 2);
    clock.set(at("2026-11-22T04:30:00.000Z"));
    server.check_in(&token, "s=1").await;
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.errored", "snitch.errored"],
        "a new period may alert again"
    );
    server.tick_at(&clock, at("2026-11-22T05:59:59.999Z")).await;
    assert_eq!(server.status_of(&token).await, "errored");
}

/// healthchecks' ping forms: `/<token>/fail` and `/<token>/<exit status>`, and the same
/// under `/ping/`, answered as healthchecks answers; the forms that need runs (`/start`,
/// `/log`) and anything else are 404s that record nothing.
#[tokio::test]
async fn healthchecks_ping_forms_record_the_exit_status() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let url = server.check_in_url(&token);
    let ping = format!("{}/ping/{token}", server.check_in_base);

    for (target, answer) in [
        (format!("{url}/fail"), StatusCode::ACCEPTED),
        (format!("{url}/0"), StatusCode::ACCEPTED),
        (format!("{url}/3?m=disk%20full"), StatusCode::ACCEPTED),
        (format!("{url}/00"), StatusCode::ACCEPTED),
        (ping.clone(), StatusCode::OK),
        (format!("{ping}/255"), StatusCode::OK),
    ] {
        let response = send(server.client.post(&target)).await;
        assert_eq!(response.status(), answer, "{target}");
        if answer == StatusCode::OK {
            assert_eq!(response.headers()["ping-body-limit"], "10000", "{target}");
            assert_eq!(response.text().await.expect("body"), "OK", "{target}");
        }
    }
    let recorded: Vec<(Outcome, Option<String>)> = check_ins(&server, &token)
        .await
        .into_iter()
        .rev()
        .map(|c| (c.outcome.clone(), message(&c).map(str::to_owned)))
        .collect();
    let error = |status: &str| Outcome::Error {
        exit_status: status.into(),
    };
    assert_eq!(
        recorded,
        [
            (error("1"), None),
            (Outcome::Success, None),
            (error("3"), Some("disk full".into())),
            (Outcome::Success, None),
            (Outcome::Success, None),
            (error("255"), None),
        ]
    );

    // `/start` and `/log` are runs (tests/runs.rs); these are no check-in's.
    for target in [
        format!("{url}/256"),
        format!("{url}/-1"),
        format!("{url}/+5"),
        format!("{url}/0256"),
        format!("{url}/fail/more"),
        format!("{ping}/begin"),
        format!("{}/ping/nosuchtoken00000000", server.check_in_base),
        format!("{}/ping/", server.check_in_base),
    ] {
        let response = send(server.client.post(&target)).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{target}");
    }
    assert_eq!(check_ins(&server, &token).await.len(), 6, "nothing more");
}
