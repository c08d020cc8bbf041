//! Badges end to end (docs/rules.md#badges): a real server, read without signing in by
//! the badge key alone.

mod common;

use std::sync::Arc;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use snitch::prelude::ManualClock;

async fn snitch(server: &Server, name: &str, interval: &str, tags: &[&str]) -> String {
    let created = server
        .post_json(
            "/v1/snitches",
            &json!({"name": name, "interval": interval, "tags": tags}),
        )
        .await;
    let status = created.status();
    let body: Value = created.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    token_of(&body)
}

/// A badge as the world reads it: status, content type, cache header and body.
async fn badge(server: &Server, path: &str) -> (u16, String, String, String) {
    let answer = send(server.anonymous(Method::GET, path)).await;
    let status = answer.status().as_u16();
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (kind, cache) = (header("content-type"), header("cache-control"));
    (status, kind, cache, answer.text().await.expect("body"))
}

fn path_of(url: &Value) -> String {
    url.as_str().expect("a URL").to_owned()
}

#[tokio::test]
async fn badges_show_up_late_and_down_to_anyone_with_the_key_and_nothing_else() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let backup = snitch(&server, "Nightly <backup>", "hourly", &["db", "prod"]).await;
    let web = snitch(&server, "Web", "daily", &["prod"]).await;
    server.check_in(&backup, "").await;
    server.check_in(&web, "").await;

    let urls = server.get_ok("/v1/badges").await;
    let all_svg = path_of(&urls["badges"]["all"]["svg"]);
    let db_json = path_of(&urls["badges"]["db"]["json"]);
    assert!(urls["badges"]["prod"]["svg"].is_string(), "{urls}");
    let per_snitch = urls["snitches"].as_array().expect("snitches");
    assert_eq!(per_snitch.len(), 2);
    let text = urls.to_string();
    for secret in [&backup, &web] {
        assert!(
            !text.contains(secret.as_str()),
            "a token in the badge URLs: {text}"
        );
    }
    assert!(!text.contains(ACME_KEY));

    let (status, kind, cache, body) = badge(&server, &all_svg).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("image/svg+xml"), "{kind}");
    assert_eq!(cache, "public, max-age=30");
    assert!(body.contains(">up<"), "{body}");
    let (status, kind, _, body) = badge(&server, &db_json).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("application/json"), "{kind}");
    let shields: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        shields,
        json!({"schemaVersion": 1, "label": "db", "message": "up", "color": "brightgreen"})
    );

    // The hourly snitch checked in in the 03:00 hour: it is due by 05:00; in the last
    // tenth of the 04:00 hour without its check-in, it is late.
    clock.set(at("2026-11-22T04:55:00Z"));
    let (_, _, _, body) = badge(&server, &db_json).await;
    assert!(
        body.contains("\"late\"") && body.contains("orange"),
        "{body}"
    );
    // Missing: down, for its tags and for all; the other tag's badge is its own.
    server.tick_at(&clock, at("2026-11-22T05:00:01Z")).await;
    let (_, _, _, body) = badge(&server, &all_svg).await;
    assert!(body.contains(">down<"), "{body}");
    let (_, _, _, body) = badge(&server, &db_json).await;
    assert!(body.contains("\"down\"") && body.contains("red"), "{body}");

    // The snitch's own badge names it, as text.
    let own = per_snitch
        .iter()
        .find(|s| s["name"] == "Nightly <backup>")
        .expect("listed");
    let (status, _, _, body) = badge(&server, &path_of(&own["svg"])).await;
    assert_eq!(status, 200);
    assert!(
        body.contains("Nightly &lt;backup&gt;") && body.contains(">down<"),
        "{body}"
    );
    assert!(!body.contains(backup.as_str()) && !body.contains(ACME_KEY));

    // Unknown tags, formats and keys are 404; so is another case's key for this case.
    let key = all_svg.split('/').nth(2).expect("the key").to_owned();
    for path in [
        format!("/badge/{key}/nope.svg"),
        format!("/badge/{key}/all.png"),
        format!("/badge/{key}/s/0123456789abcdef.svg"),
        "/badge/wrongkey0000000000000/all.svg".to_owned(),
        format!("/badge/{backup}/all.svg"),
        format!("/badge/{ACME_KEY}/all.svg"),
        "/badge/a%00b/all.svg".to_owned(),
    ] {
        assert_eq!(badge(&server, &path).await.0, 404, "{path}");
    }
    let theirs = send(server.request_as(OTHER_KEY, Method::GET, "/v1/badges")).await;
    let theirs: Value = theirs.json().await.expect("json");
    let their_all = path_of(&theirs["badges"]["all"]["svg"]);
    assert_ne!(their_all, all_svg);
    assert!(theirs["snitches"].as_array().expect("snitches").is_empty());

    // Rotated, the old key reads nothing.
    let rotated = send(server.request(Method::POST, "/v1/badges/rotate")).await;
    assert_eq!(rotated.status(), 200);
    let rotated: Value = rotated.json().await.expect("json");
    let new_all = path_of(&rotated["badges"]["all"]["svg"]);
    assert_ne!(new_all, all_svg);
    assert_eq!(badge(&server, &all_svg).await.0, 404);
    assert_eq!(badge(&server, &new_all).await.0, 200);
    // A badge key is not an API key.
    let new_key = new_all.split('/').nth(2).expect("the key").to_owned();
    let as_api = send(server.request_as(&new_key, Method::GET, "/v1/snitches")).await;
    assert_eq!(as_api.status(), 401);
}

/// A schedule's run is late from its expected time until its grace ends, then down.
#[tokio::test]
async fn a_scheduled_run_is_late_within_its_grace() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let created = server
        .create(json!({"name": "report", "schedule": "0 4 * * *", "grace_seconds": 1800, "tags": ["cron"]}))
        .await;
    let token = token_of(&created);
    clock.set(at("2026-11-22T04:05:00Z"));
    server.check_in(&token, "").await;
    let urls = server.get_ok("/v1/badges").await;
    let cron = path_of(&urls["badges"]["cron"]["json"]);
    let state = |body: String| -> String {
        let v: Value = serde_json::from_str(&body).expect("json");
        v["message"].as_str().expect("message").to_owned()
    };
    // Today's 04:00 run is met, within its grace; the next is tomorrow's.
    assert_eq!(state(badge(&server, &cron).await.3), "up");
    clock.set(at("2026-11-23T03:59:00Z"));
    assert_eq!(state(badge(&server, &cron).await.3), "up");
    clock.set(at("2026-11-23T04:10:00Z"));
    assert_eq!(state(badge(&server, &cron).await.3), "late");
    server.tick_at(&clock, at("2026-11-23T04:31:00Z")).await;
    assert_eq!(state(badge(&server, &cron).await.3), "down");
}
