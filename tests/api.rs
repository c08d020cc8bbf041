//! Black-box tests of the v1 JSON API (docs/api.md; docs/rules.md#state-machine,
//! docs/rules.md#api-details, docs/rules.md#administration) against a real server on port
//! 0, over HTTP.

mod common;

use std::sync::Arc;

use chrono::Duration;
use common::*;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use snitch::prelude::{Clock, ManualClock};

// ---------------------------------------------------------------------------------------
// Create

#[tokio::test]
async fn create_answers_200_with_the_defaults_of_a_new_snitch() {
    let server = Server::start().await;
    let response = server
        .post_json(
            "/v1/snitches",
            &json!({"name": "Nightly backup", "interval": "daily"}),
        )
        .await;
    // Compat: 200, not 201.
    let snitch = json_ok(response).await;
    let token = token_of(&snitch);
    assert!(is_token(&token), "{token}");
    assert_eq!(snitch["href"], format!("/v1/snitches/{token}"));
    assert_eq!(snitch["name"], "Nightly backup");
    assert_eq!(snitch["tags"], json!([]));
    assert_eq!(snitch["status"], "pending");
    assert_eq!(snitch["notes"], "");
    assert_eq!(snitch["checked_in_at"], Value::Null);
    assert_eq!(snitch["check_in_url"], server.check_in_url(&token));
    assert_eq!(snitch["interval"], "daily");
    assert_eq!(snitch["type"], json!({"interval": "daily"}));
    assert_eq!(snitch["alert_type"], "basic");
    assert_eq!(snitch["alert_email"], json!([]));
    assert_eq!(snitch["deadline_at"], Value::Null, "null while pending");
    let created_at = snitch["created_at"].as_str().expect("created_at");
    assert!(is_wire_time(created_at), "{created_at}");

    // The same object is what GET shows.
    let fetched = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(fetched, snitch);
}

#[tokio::test]
async fn create_takes_every_parameter() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({
            "name": "  Queue worker  ",
            "interval": "hourly",
            "alert_type": "smart",
            "alert_email": ["a@acme.test", "b@acme.test"],
            "notes": "Restart the worker",
            "tags": ["prod", "queue", "prod"],
        }))
        .await;
    assert_eq!(snitch["name"], "Queue worker", "trimmed");
    assert_eq!(snitch["interval"], "hourly");
    assert_eq!(snitch["type"]["interval"], "hourly");
    assert_eq!(snitch["alert_type"], "smart");
    assert_eq!(snitch["alert_email"], json!(["a@acme.test", "b@acme.test"]));
    assert_eq!(snitch["notes"], "Restart the worker");
    assert_eq!(
        snitch["tags"],
        json!(["prod", "queue"]),
        "order kept, dupes dropped"
    );

    let listed = server
        .create(
            json!({"name": "csv", "interval": "weekly", "alert_email": "a@acme.test, b@acme.test"}),
        )
        .await;
    assert_eq!(listed["alert_email"], json!(["a@acme.test", "b@acme.test"]));
}

#[tokio::test]
async fn created_at_and_checked_in_at_come_from_the_clock_in_milliseconds() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let snitch = server
        .create(json!({"name": "n", "interval": "hourly"}))
        .await;
    assert_eq!(snitch["created_at"], "2026-11-22T03:00:00.123Z");
    let token = token_of(&snitch);

    clock.advance(Duration::milliseconds(1_500));
    server.check_in(&token, "").await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "healthy");
    assert_eq!(snitch["checked_in_at"], "2026-11-22T03:00:01.623Z");
    // Checked in during [03:00, 04:00): due by the end of the next hour.
    assert_eq!(snitch["deadline_at"], "2026-11-22T05:00:00.000Z");
}

// ---------------------------------------------------------------------------------------
// Validation

#[tokio::test]
async fn an_empty_object_lists_every_missing_attribute_at_once() {
    let server = Server::start().await;
    let validations = assert_invalid(server.post_json("/v1/snitches", &json!({})).await).await;
    assert_eq!(
        validations,
        [
            ("name".to_owned(), "can't be blank".to_owned()),
            ("interval".to_owned(), "can't be blank".to_owned()),
        ]
    );
}

#[tokio::test]
async fn an_empty_body_means_no_parameters_with_or_without_a_content_type() {
    let server = Server::start().await;
    for with_type in [false, true] {
        let mut request = server.request(Method::POST, "/v1/snitches").body("");
        if with_type {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        let validations = assert_invalid(send(request).await).await;
        assert_eq!(
            attributes(&validations),
            ["name", "interval"],
            "{with_type}"
        );
    }
    // Whitespace only is empty too.
    let request = server
        .request(Method::POST, "/v1/snitches")
        .header(CONTENT_TYPE, "application/json")
        .body("  \n");
    assert_invalid(send(request).await).await;
}

#[tokio::test]
async fn blank_and_unknown_values_are_refused() {
    let server = Server::start().await;
    let validations = assert_invalid(
        server
            .post_json("/v1/snitches", &json!({"name": "   ", "interval": ""}))
            .await,
    )
    .await;
    assert_eq!(
        validations,
        [
            ("name".to_owned(), "can't be blank".to_owned()),
            ("interval".to_owned(), "can't be blank".to_owned()),
        ]
    );

    let validations = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "n", "interval": "fortnightly"}),
            )
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["interval"]);
    let message = &validations[0].1;
    for allowed in [
        "1_minute",
        "5_minute",
        "30_minute",
        "hourly",
        "12_hour",
        "daily",
        "weekly",
        "monthly",
    ] {
        assert!(message.contains(allowed), "{message} lists {allowed}");
    }

    let validations = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "n", "interval": "daily", "alert_type": "clever"}),
            )
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["alert_type"]);

    let validations = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "n", "interval": "daily", "alert_email": ["not-an-address"]}),
            )
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["alert_email"]);

    // Several problems of different attributes come together.
    let validations = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"interval": "sometimes", "notes": "x".repeat(10_001), "tags": ["a,b"]}),
            )
            .await,
    )
    .await;
    let mut names = attributes(&validations);
    names.sort_unstable();
    assert_eq!(names, ["interval", "name", "notes", "tags"]);

    // Nothing was created.
    assert_eq!(server.get_ok("/v1/snitches").await, json!([]));
}

#[tokio::test]
async fn smart_alerts_need_an_interval_of_an_hour_or_longer() {
    let server = Server::start().await;
    let validations = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "n", "interval": "5_minute", "alert_type": "smart"}),
            )
            .await,
    )
    .await;
    assert_eq!(
        validations,
        [(
            "alert_type".to_owned(),
            "smart alerts need an interval of an hour or longer".to_owned()
        )]
    );

    // The same rule on update, in both directions.
    let token = server.create_snitch("n", "5_minute").await;
    let path = format!("/v1/snitches/{token}");
    let validations = assert_invalid(
        server
            .patch_json(&path, &json!({"alert_type": "smart"}))
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["alert_type"]);
    let smart = server
        .create(json!({"name": "s", "interval": "hourly", "alert_type": "smart"}))
        .await;
    let smart_path = format!("/v1/snitches/{}", token_of(&smart));
    let validations = assert_invalid(
        server
            .patch_json(&smart_path, &json!({"interval": "30_minute"}))
            .await,
    )
    .await;
    assert_eq!(
        validations,
        [(
            "alert_type".to_owned(),
            "smart alerts need an interval of an hour or longer".to_owned()
        )]
    );
    // Nothing changed.
    assert_eq!(server.get_ok(&path).await["alert_type"], "basic");
    assert_eq!(server.get_ok(&smart_path).await["interval"], "hourly");
}

// ---------------------------------------------------------------------------------------
// Compat request forms

#[tokio::test]
async fn compat_request_forms_are_accepted() {
    let server = Server::start().await;

    // A content type with parameters.
    let request = server
        .request(Method::POST, "/v1/snitches")
        .header(CONTENT_TYPE, "application/json; charset=utf-8")
        .body(r#"{"name": "charset", "interval": "daily"}"#);
    let snitch = json_ok(send(request).await).await;
    assert_eq!(snitch["name"], "charset");

    // No content type at all.
    let request = server
        .request(Method::POST, "/v1/snitches")
        .body(r#"{"name": "untyped", "interval": "daily"}"#);
    json_ok(send(request).await).await;

    // `type.interval` stands in for an absent `interval`.
    let snitch = server
        .create(json!({"name": "typed", "type": {"interval": "2_hour"}}))
        .await;
    assert_eq!(snitch["interval"], "2_hour");
    assert_eq!(snitch["type"], json!({"interval": "2_hour"}));
    // ... but the top-level one wins when both are given.
    let snitch = server
        .create(json!({"name": "both", "interval": "weekly", "type": {"interval": "2_hour"}}))
        .await;
    assert_eq!(snitch["interval"], "weekly");

    // Read-only and unknown fields are ignored.
    let snitch = server
        .create(json!({
            "name": "echo",
            "interval": "daily",
            "token": "aaaaaaaaaaaaaaaaaaaa",
            "href": "/v1/snitches/aaaaaaaaaaaaaaaaaaaa",
            "status": "healthy",
            "check_in_url": "https://elsewhere.test/x",
            "created_at": "2001-01-01T00:00:00.000Z",
            "checked_in_at": "2001-01-01T00:00:00.000Z",
            "color": "blue",
        }))
        .await;
    assert_ne!(snitch["token"], "aaaaaaaaaaaaaaaaaaaa");
    assert_eq!(snitch["status"], "pending");
    assert_eq!(snitch["checked_in_at"], Value::Null);
    assert_ne!(snitch["created_at"], "2001-01-01T00:00:00.000Z");
    assert_eq!(
        snitch["check_in_url"],
        server.check_in_url(&token_of(&snitch))
    );
    assert!(snitch.get("color").is_none());

    // A client that echoes a fetched snitch back as its update changes nothing.
    let path = format!("/v1/snitches/{}", token_of(&snitch));
    let echoed = json_ok(server.patch_json(&path, &snitch).await).await;
    assert_eq!(echoed, snitch);
}

// ---------------------------------------------------------------------------------------
// Get and list

#[tokio::test]
async fn get_of_an_unknown_or_malformed_token_is_404() {
    let server = Server::start().await;
    for token in ["abcdefghij0123456789", "nope", "UPPERCASEUPPERCASE"] {
        let response = server.get(&format!("/v1/snitches/{token}")).await;
        assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;
    }
}

#[tokio::test]
async fn list_is_an_empty_array_then_every_snitch_oldest_first() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    assert_eq!(server.get_ok("/v1/snitches").await, json!([]));

    let mut tokens = Vec::new();
    for (name, interval) in [
        ("first", "daily"),
        ("second", "15_minute"),
        ("third", "monthly"),
    ] {
        tokens.push(server.create_snitch(name, interval).await);
        clock.advance(Duration::seconds(1));
    }
    let list = server.get_ok("/v1/snitches").await;
    let items = list.as_array().expect("array");
    let names: Vec<_> = items.iter().map(|s| s["name"].clone()).collect();
    assert_eq!(names, [json!("first"), json!("second"), json!("third")]);
    for (item, token) in items.iter().zip(&tokens) {
        assert_eq!(item["token"], token.as_str());
        // Compat: list items carry check_in_url and type too.
        assert_eq!(item["check_in_url"], server.check_in_url(token));
        assert_eq!(item["type"]["interval"], item["interval"]);
        assert_eq!(item, &server.get_ok(&format!("/v1/snitches/{token}")).await);
    }

    // Another case sees none of them.
    let response = send(server.request_as(OTHER_KEY, Method::GET, "/v1/snitches")).await;
    assert_eq!(json_ok(response).await, json!([]));
}

#[tokio::test]
async fn the_tag_filter_requires_every_listed_tag() {
    let server = Server::start().await;
    let mut names_by_tags = Vec::new();
    for (name, tags) in [
        ("none", json!([])),
        ("a", json!(["a"])),
        ("ab", json!(["a", "b"])),
        ("b-spaced", json!(["b", "needs space"])),
    ] {
        server
            .create(json!({"name": name, "interval": "daily", "tags": tags}))
            .await;
        names_by_tags.push(name);
    }
    let names = |list: Value| -> Vec<String> {
        list.as_array()
            .expect("array")
            .iter()
            .map(|s| s["name"].as_str().expect("name").to_owned())
            .collect()
    };
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=a").await),
        ["a", "ab"]
    );
    assert_eq!(names(server.get_ok("/v1/snitches?tags=a,b").await), ["ab"]);
    assert_eq!(names(server.get_ok("/v1/snitches?tags=b,a").await), ["ab"]);
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=b").await),
        ["ab", "b-spaced"]
    );
    // Percent-encoded values are decoded, then split on commas.
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=a%2Cb").await),
        ["ab"]
    );
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=needs%20space").await),
        ["b-spaced"]
    );
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=needs+space,b").await),
        ["b-spaced"]
    );
    // No match: an empty array.
    assert_eq!(server.get_ok("/v1/snitches?tags=zzz").await, json!([]));
    assert_eq!(server.get_ok("/v1/snitches?tags=a,zzz").await, json!([]));
    // `tags=` empty (and no query) mean no filter.
    assert_eq!(
        names(server.get_ok("/v1/snitches?tags=").await),
        names_by_tags
    );
    assert_eq!(names(server.get_ok("/v1/snitches").await), names_by_tags);
}

// ---------------------------------------------------------------------------------------
// Update

#[tokio::test]
async fn update_changes_only_the_given_fields() {
    let server = Server::start().await;
    let created = server
        .create(json!({
            "name": "Backup",
            "interval": "daily",
            "notes": "call Bob",
            "tags": ["a", "b"],
            "alert_email": ["ops@acme.test"],
        }))
        .await;
    let token = token_of(&created);
    let path = format!("/v1/snitches/{token}");

    let updated = json_ok(
        server
            .patch_json(&path, &json!({"name": "Backup v2"}))
            .await,
    )
    .await;
    let mut expected = created.clone();
    expected["name"] = json!("Backup v2");
    assert_eq!(updated, expected, "only the name changed");

    // Tags replace the whole list; the interval moves `type` too.
    let updated = json_ok(
        server
            .patch_json(&path, &json!({"tags": ["c", "a"], "interval": "weekly"}))
            .await,
    )
    .await;
    assert_eq!(updated["tags"], json!(["c", "a"]));
    assert_eq!(updated["interval"], "weekly");
    assert_eq!(updated["type"], json!({"interval": "weekly"}));
    assert_eq!(updated["notes"], "call Bob");
    assert_eq!(updated["alert_email"], json!(["ops@acme.test"]));

    // alert_email as one comma-separated string.
    let updated = json_ok(
        server
            .patch_json(&path, &json!({"alert_email": "x@acme.test,y@acme.test"}))
            .await,
    )
    .await;
    assert_eq!(
        updated["alert_email"],
        json!(["x@acme.test", "y@acme.test"])
    );

    // null (and []) disable the override; null notes is empty; [] removes every tag.
    let updated = json_ok(
        server
            .patch_json(
                &path,
                &json!({"alert_email": null, "notes": null, "tags": []}),
            )
            .await,
    )
    .await;
    assert_eq!(updated["alert_email"], json!([]));
    assert_eq!(updated["notes"], "");
    assert_eq!(updated["tags"], json!([]));
    let updated = json_ok(
        server
            .patch_json(
                &path,
                &json!({"alert_email": ["z@acme.test"], "tags": null}),
            )
            .await,
    )
    .await;
    assert_eq!(updated["alert_email"], json!(["z@acme.test"]));
    let updated = json_ok(server.patch_json(&path, &json!({"alert_email": []})).await).await;
    assert_eq!(updated["alert_email"], json!([]));

    // An empty object and an empty body change nothing.
    let unchanged = json_ok(server.patch_json(&path, &json!({})).await).await;
    assert_eq!(unchanged, updated);
    let unchanged = json_ok(send(server.request(Method::PATCH, &path).body("")).await).await;
    assert_eq!(unchanged, updated);

    // Invalid values are 422 and leave the snitch alone.
    let validations = assert_invalid(
        server
            .patch_json(&path, &json!({"name": "", "interval": "yearly"}))
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["name", "interval"]);
    assert_eq!(server.get_ok(&path).await, updated);
    assert_eq!(updated["token"], token.as_str());
    assert_eq!(updated["created_at"], created["created_at"]);
}

// ---------------------------------------------------------------------------------------
// Tags

#[tokio::test]
async fn add_tags_appends_in_order_and_drops_duplicates() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({"name": "n", "interval": "daily", "tags": ["a"]}))
        .await;
    let path = format!("/v1/snitches/{}", token_of(&snitch));

    let response = server
        .post_json(&format!("{path}/tags"), &json!(["c", "a", "b", "c"]))
        .await;
    assert_eq!(json_ok(response).await, json!(["a", "c", "b"]));
    let response = server
        .post_json(&format!("{path}/tags"), &json!(["needs space"]))
        .await;
    assert_eq!(
        json_ok(response).await,
        json!(["a", "c", "b", "needs space"])
    );
    assert_eq!(
        server.get_ok(&path).await["tags"],
        json!(["a", "c", "b", "needs space"])
    );

    // Not an array of strings, or a tag with a comma: 422, nothing added.
    for body in [
        json!({"tags": ["x"]}),
        json!([1, 2]),
        json!(["ok", "a,b"]),
        json!([]),
    ] {
        let response = server.post_json(&format!("{path}/tags"), &body).await;
        assert_eq!(
            attributes(&assert_invalid(response).await),
            ["tags"],
            "{body}"
        );
    }
    assert_eq!(
        server.get_ok(&path).await["tags"],
        json!(["a", "c", "b", "needs space"])
    );
}

#[tokio::test]
async fn remove_tag_decodes_percent_escapes_and_plus_as_a_space() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({
            "name": "n",
            "interval": "daily",
            "tags": ["needs space", "other space", "keep", "c++", "50%"],
        }))
        .await;
    let path = format!("/v1/snitches/{}/tags", token_of(&snitch));

    let response = server.delete(&format!("{path}/needs+space")).await;
    assert_eq!(
        json_ok(response).await,
        json!(["other space", "keep", "c++", "50%"])
    );
    let response = server.delete(&format!("{path}/other%20space")).await;
    assert_eq!(json_ok(response).await, json!(["keep", "c++", "50%"]));
    // A literal `+` arrives form-encoded as %2B; a literal `%` as %25.
    let response = server.delete(&format!("{path}/c%2B%2B")).await;
    assert_eq!(json_ok(response).await, json!(["keep", "50%"]));
    let response = server.delete(&format!("{path}/50%25")).await;
    assert_eq!(json_ok(response).await, json!(["keep"]));
    // Removing a tag that is not there is harmless.
    let response = server.delete(&format!("{path}/absent")).await;
    assert_eq!(json_ok(response).await, json!(["keep"]));
    let response = server.delete(&format!("{path}/keep")).await;
    assert_eq!(json_ok(response).await, json!([]));
}

// ---------------------------------------------------------------------------------------
// Pause, unpause, delete

#[tokio::test]
async fn a_pending_snitch_cannot_be_paused() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let response = server
        .post_json(&format!("/v1/snitches/{token}/pause"), &json!({}))
        .await;
    assert_eq!(
        assert_invalid(response).await,
        [(
            "status".to_owned(),
            "can't be paused while pending".to_owned()
        )]
    );
    assert_eq!(server.status_of(&token).await, "pending");
}

#[tokio::test]
async fn pause_and_unpause_answer_204_with_an_empty_body() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let path = format!("/v1/snitches/{token}");
    server.check_in(&token, "").await;

    // No body at all: until healthy.
    let response = send(server.request(Method::POST, &format!("{path}/pause"))).await;
    assert_no_content(response).await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "paused");
    assert_eq!(snitch["deadline_at"], Value::Null, "null while paused");
    // Pausing again is safe.
    assert_no_content(server.post_json(&format!("{path}/pause"), &json!({})).await).await;
    assert_eq!(server.status_of(&token).await, "paused");

    let response = send(server.request(Method::POST, &format!("{path}/unpause"))).await;
    assert_no_content(response).await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "healthy");
    assert!(snitch["deadline_at"].is_string());
    // Unpausing a snitch that is not paused is a no-op, still 204.
    let response = send(server.request(Method::POST, &format!("{path}/unpause"))).await;
    assert_no_content(response).await;
    assert_eq!(server.status_of(&token).await, "healthy");

    // Only paused and check-in events: unpause emits nothing.
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.paused"]
    );
}

#[tokio::test]
async fn pause_until_healthy_ends_with_the_next_success_check_in() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    let pause = format!("/v1/snitches/{token}/pause");
    assert_no_content(server.post_json(&pause, &json!({"until": "healthy"})).await).await;
    assert_eq!(server.status_of(&token).await, "paused");
    // An error check-in does not end it.
    server.check_in(&token, "s=1").await;
    assert_eq!(server.status_of(&token).await, "paused");
    server.check_in(&token, "").await;
    assert_eq!(server.status_of(&token).await, "healthy");
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.paused", "snitch.reporting"]
    );
}

#[tokio::test]
async fn pause_until_unpaused_survives_check_ins() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    let path = format!("/v1/snitches/{token}");
    assert_no_content(
        server
            .post_json(&format!("{path}/pause"), &json!({"until": "unpaused"}))
            .await,
    )
    .await;
    server.check_in(&token, "").await;
    server.check_in(&token, "").await;
    assert_eq!(server.status_of(&token).await, "paused");
    assert_no_content(send(server.request(Method::POST, &format!("{path}/unpause"))).await).await;
    assert_eq!(server.status_of(&token).await, "healthy");
}

#[tokio::test]
async fn pause_until_a_time_resumes_at_that_time() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    let path = format!("/v1/snitches/{token}");

    // In the past, or not a time: 422 on `until`, and nothing changes.
    for until in [
        "2026-11-22T02:59:59.000Z",
        "2020-01-01T00:00:00Z",
        "tomorrow",
        "2026-13-45",
    ] {
        let response = server
            .post_json(&format!("{path}/pause"), &json!({"until": until}))
            .await;
        assert_eq!(
            attributes(&assert_invalid(response).await),
            ["until"],
            "{until}"
        );
    }
    let response = server
        .post_json(&format!("{path}/pause"), &json!({"until": 42}))
        .await;
    assert_eq!(attributes(&assert_invalid(response).await), ["until"]);
    assert_eq!(server.status_of(&token).await, "healthy");

    // Any offset is accepted.
    let response = server
        .post_json(
            &format!("{path}/pause"),
            &json!({"until": "2026-11-22T05:00:00+01:00"}),
        )
        .await;
    assert_no_content(response).await;
    server.check_in(&token, "").await;
    assert_eq!(server.status_of(&token).await, "paused");

    // 04:00Z is the resume time.
    server.tick_at(&clock, at("2026-11-22T03:59:59.999Z")).await;
    assert_eq!(server.status_of(&token).await, "paused");
    server.tick_at(&clock, at("2026-11-22T04:00:00.000Z")).await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "healthy");
    assert!(snitch["deadline_at"].is_string());
}

#[tokio::test]
async fn delete_answers_204_then_the_snitch_and_its_check_in_url_are_gone() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let keep = server.create_snitch("keep", "daily").await;
    let path = format!("/v1/snitches/{token}");
    server.check_in(&token, "").await;

    assert_no_content(server.delete(&path).await).await;
    assert_error(
        server.get(&path).await,
        StatusCode::NOT_FOUND,
        "resource_not_found",
    )
    .await;
    assert_error(
        server.delete(&path).await,
        StatusCode::NOT_FOUND,
        "resource_not_found",
    )
    .await;
    let response = send(server.client.get(server.check_in_url(&token))).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let list = server.get_ok("/v1/snitches").await;
    assert_eq!(list.as_array().expect("array").len(), 1);
    assert_eq!(list[0]["token"], keep.as_str());
}

// ---------------------------------------------------------------------------------------
// Webhooks extension

#[tokio::test]
async fn webhooks_can_be_listed_created_and_deleted() {
    let server = Server::start().await;
    assert_eq!(server.get_ok("/v1/webhooks").await, json!([]));

    let response = server
        .post_json(
            "/v1/webhooks",
            &json!({"url": "https://hooks.acme.test/snitch", "secret": "s3cret"}),
        )
        .await;
    let hook = json_ok(response).await;
    let object = hook.as_object().expect("object");
    let mut keys: Vec<_> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["created_at", "id", "url"], "no secret: {hook}");
    assert!(!hook.to_string().contains("s3cret"));
    assert_eq!(hook["url"], "https://hooks.acme.test/snitch");
    assert!(is_wire_time(hook["created_at"].as_str().expect("time")));
    let id = hook["id"].as_str().expect("id").to_owned();

    // Without a secret too.
    let second = json_ok(
        server
            .post_json(
                "/v1/webhooks",
                &json!({"url": "http://user:pw@hooks.acme.test:8080/x"}),
            )
            .await,
    )
    .await;
    let listed = server.get_ok("/v1/webhooks").await;
    assert_eq!(listed, json!([hook, second]));

    // Another case neither sees nor deletes them.
    let response = send(server.request_as(OTHER_KEY, Method::GET, "/v1/webhooks")).await;
    assert_eq!(json_ok(response).await, json!([]));
    let response =
        send(server.request_as(OTHER_KEY, Method::DELETE, &format!("/v1/webhooks/{id}"))).await;
    assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;

    assert_no_content(server.delete(&format!("/v1/webhooks/{id}")).await).await;
    assert_eq!(server.get_ok("/v1/webhooks").await, json!([second]));
    let response = server.delete(&format!("/v1/webhooks/{id}")).await;
    assert_error(response, StatusCode::NOT_FOUND, "resource_not_found").await;
}

#[tokio::test]
async fn query_values_of_webhook_urls_are_masked_wherever_shown() {
    let server = Server::start().await;
    let url = "https://ops:pw@hooks.acme.test/x?token=s3cret&channel=ops&flag";
    let masked = "https://ops:***@hooks.acme.test/x?token=***&channel=***&flag";
    let hook = json_ok(server.post_json("/v1/webhooks", &json!({"url": url})).await).await;
    assert_eq!(hook["url"], masked);
    assert_eq!(server.get_ok("/v1/webhooks").await[0]["url"], masked);

    // The events endpoint's deliveries show the target without credentials or values.
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    let text = events.to_string();
    assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
    let targets: Vec<&str> = events[0]["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .filter(|d| d["channel"] == "webhook")
        .map(|d| d["target"].as_str().expect("target"))
        .collect();
    assert_eq!(
        targets,
        ["https://hooks.acme.test/x?token=***&channel=***&flag"]
    );
}

#[tokio::test]
async fn invalid_webhook_urls_are_422() {
    let server = Server::start().await;
    for url in [
        "ftp://hooks.acme.test/x",
        "http://",
        "http://:80/x",
        "not a url",
        "",
        "mailto:a@acme.test",
    ] {
        let response = server.post_json("/v1/webhooks", &json!({"url": url})).await;
        assert_eq!(
            attributes(&assert_invalid(response).await),
            ["url"],
            "{url:?}"
        );
    }
    let response = server.post_json("/v1/webhooks", &json!({})).await;
    assert_eq!(attributes(&assert_invalid(response).await), ["url"]);
    assert_eq!(server.get_ok("/v1/webhooks").await, json!([]));
}

// ---------------------------------------------------------------------------------------
// Errors: 400, 401, 404, 402, 413, 429, 503

#[tokio::test]
async fn malformed_json_is_400_with_an_empty_body() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    server.check_in(&token, "").await;
    for (method, path) in [
        (Method::POST, "/v1/snitches".to_owned()),
        (Method::PATCH, format!("/v1/snitches/{token}")),
        (Method::POST, format!("/v1/snitches/{token}/tags")),
        (Method::POST, format!("/v1/snitches/{token}/pause")),
        (Method::POST, "/v1/webhooks".to_owned()),
    ] {
        for body in [r#"{"name": "n""#, "not json", "{'a': 1}"] {
            let request = server
                .request(method.clone(), &path)
                .header(CONTENT_TYPE, "application/json")
                .body(body);
            let response = send(request).await;
            assert_eq!(
                response.status(),
                StatusCode::BAD_REQUEST,
                "{method} {path}"
            );
            assert_eq!(response.text().await.expect("body"), "", "{method} {path}");
        }
    }
    assert_eq!(server.status_of(&token).await, "healthy", "not paused");
    assert_eq!(
        server.get_ok("/v1/snitches").await.as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn a_missing_or_wrong_key_is_401_api_key_invalid() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let requests = [
        ("no header", server.anonymous(Method::GET, "/v1/snitches")),
        (
            "unknown key",
            server.request_as(
                "no-such-key-000000000000000000000000",
                Method::GET,
                "/v1/snitches",
            ),
        ),
        (
            "empty user",
            server.request_as("", Method::GET, "/v1/snitches"),
        ),
        (
            "bearer",
            server
                .anonymous(Method::GET, "/v1/snitches")
                .bearer_auth(ACME_KEY),
        ),
        (
            "raw key",
            server
                .anonymous(Method::GET, "/v1/snitches")
                .header("Authorization", ACME_KEY),
        ),
        (
            "not base64",
            server
                .anonymous(Method::GET, "/v1/snitches")
                .header("Authorization", "Basic !!!"),
        ),
        (
            "key as password",
            server
                .anonymous(Method::GET, "/v1/snitches")
                .basic_auth("", Some(ACME_KEY)),
        ),
        (
            "write without key",
            server.anonymous(Method::DELETE, &format!("/v1/snitches/{token}")),
        ),
        ("webhooks", server.anonymous(Method::GET, "/v1/webhooks")),
    ];
    for (what, request) in requests {
        let response = send(request).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
        assert_error(response, StatusCode::UNAUTHORIZED, "api_key_invalid").await;
    }
    // Nothing was deleted.
    assert_eq!(server.status_of(&token).await, "pending");
}

#[tokio::test]
async fn every_key_of_a_case_works_and_the_password_is_ignored() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let path = format!("/v1/snitches/{token}");
    let with_password = server
        .anonymous(Method::GET, &path)
        .basic_auth(ACME_KEY, Some("anything at all"));
    assert_eq!(
        json_ok(send(with_password).await).await["token"],
        token.as_str()
    );
    let no_password = server
        .anonymous(Method::GET, &path)
        .basic_auth(ACME_KEY, None::<&str>);
    json_ok(send(no_password).await).await;
    let second_key = server.request_as(ACME_KEY_2, Method::GET, &path);
    json_ok(send(second_key).await).await;
    // Lower-case scheme.
    let lower = server
        .anonymous(Method::GET, &path)
        .header("Authorization", basic_header("basic", ACME_KEY_2));
    json_ok(send(lower).await).await;
}

/// `<scheme> base64(<key>:)`, encoded here so the test does not trust the client's.
fn basic_header(scheme: &str, key: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = format!("{key}:").into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    format!("{scheme} {out}")
}

#[tokio::test]
async fn another_cases_snitch_is_404_resource_not_found() {
    let server = Server::start().await;
    let token = server.create_snitch("mine", "daily").await;
    server.check_in(&token, "").await;
    let path = format!("/v1/snitches/{token}");
    let requests = [
        server.request_as(OTHER_KEY, Method::GET, &path),
        server
            .request_as(OTHER_KEY, Method::PATCH, &path)
            .json(&json!({"name": "stolen"})),
        server
            .request_as(OTHER_KEY, Method::POST, &format!("{path}/tags"))
            .json(&json!(["stolen"])),
        server.request_as(OTHER_KEY, Method::DELETE, &format!("{path}/tags/x")),
        server.request_as(OTHER_KEY, Method::POST, &format!("{path}/pause")),
        server.request_as(OTHER_KEY, Method::POST, &format!("{path}/unpause")),
        server.request_as(OTHER_KEY, Method::DELETE, &path),
    ];
    for request in requests {
        assert_error(
            send(request).await,
            StatusCode::NOT_FOUND,
            "resource_not_found",
        )
        .await;
    }
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["name"], "mine");
    assert_eq!(snitch["tags"], json!([]));
    assert_eq!(snitch["status"], "healthy");
}

#[tokio::test]
async fn unknown_api_paths_are_404_json() {
    let server = Server::start().await;
    for path in ["/v1/nothing", "/v2/snitches", "/"] {
        assert_error(
            server.get(path).await,
            StatusCode::NOT_FOUND,
            "resource_not_found",
        )
        .await;
    }
}

#[tokio::test]
async fn creating_beyond_the_plan_is_402_plan_limit_reached() {
    let cases = format!(
        "{}\n[[case]]\nname = \"small\"\nmax_snitches = 1\napi_keys = [\"small-key-0000000000000000000000000001\"]\n",
        default_cases()
    );
    let server = Server::start_with(NO_RATE_LIMIT, &cases).await;
    let key = "small-key-0000000000000000000000000001";
    let body = json!({"name": "n", "interval": "daily"});
    let first = send(
        server
            .request_as(key, Method::POST, "/v1/snitches")
            .json(&body),
    )
    .await;
    let first = json_ok(first).await;
    let second = send(
        server
            .request_as(key, Method::POST, "/v1/snitches")
            .json(&body),
    )
    .await;
    assert_error(second, StatusCode::PAYMENT_REQUIRED, "plan_limit_reached").await;
    // Other cases are not limited by it.
    server.create_snitch("acme", "daily").await;

    // After a delete there is room again.
    let path = format!("/v1/snitches/{}", token_of(&first));
    assert_no_content(send(server.request_as(key, Method::DELETE, &path)).await).await;
    let third = send(
        server
            .request_as(key, Method::POST, "/v1/snitches")
            .json(&body),
    )
    .await;
    json_ok(third).await;
}

#[tokio::test]
async fn a_case_on_hold_gets_402_account_on_hold_but_its_check_ins_count() {
    let cases = format!(
        "{}\n[[case]]\nname = \"held\"\non_hold = true\napi_keys = [\"held-key-00000000000000000000000000001\"]\n",
        default_cases()
    );
    let server = Server::start_with(NO_RATE_LIMIT, &cases).await;
    let key = "held-key-00000000000000000000000000001";
    // A snitch made before the hold (through the service, as the API refuses).
    let held = server.active_case("held").await;
    let fields = snitch::prelude::SnitchFields {
        name: Some("old job".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let snitch = server
        .running
        .service
        .create(&held, &fields)
        .await
        .expect("created");
    let token = snitch.token().to_string();
    let path = format!("/v1/snitches/{token}");

    let requests = [
        server.request_as(key, Method::GET, "/v1/snitches"),
        server.request_as(key, Method::GET, &path),
        server
            .request_as(key, Method::POST, "/v1/snitches")
            .json(&json!({"name": "n", "interval": "daily"})),
        server
            .request_as(key, Method::PATCH, &path)
            .json(&json!({"name": "n"})),
        server
            .request_as(key, Method::POST, &format!("{path}/tags"))
            .json(&json!(["x"])),
        server.request_as(key, Method::DELETE, &format!("{path}/tags/x")),
        server.request_as(key, Method::POST, &format!("{path}/pause")),
        server.request_as(key, Method::POST, &format!("{path}/unpause")),
        server.request_as(key, Method::DELETE, &path),
        server.request_as(key, Method::GET, "/v1/webhooks"),
        server
            .request_as(key, Method::POST, "/v1/webhooks")
            .json(&json!({"url": "https://hooks.test/x"})),
        server.request_as(key, Method::DELETE, "/v1/webhooks/abc"),
    ];
    for request in requests {
        assert_error(
            send(request).await,
            StatusCode::PAYMENT_REQUIRED,
            "account_on_hold",
        )
        .await;
    }

    // Check-ins are still answered 202 and recorded.
    let response = send(
        server
            .client
            .get(format!("{}?m=still+running", server.check_in_url(&token))),
    )
    .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let check_ins = server
        .running
        .service
        .check_ins(&held, &token, 10)
        .await
        .expect("check-ins");
    assert_eq!(check_ins.len(), 1);
    assert_eq!(
        check_ins[0].message.as_ref().map(|m| m.as_str()),
        Some("still running")
    );
    let stored = server
        .running
        .service
        .get(&held, &token)
        .await
        .expect("snitch");
    assert_eq!(stored.status().as_str(), "healthy");
    // The snitch still exists: nothing above deleted it.
    assert_eq!(stored.name().as_str(), "old job");
}

#[tokio::test]
async fn a_body_over_64_kib_is_413() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let big = json!({"name": "n", "interval": "daily", "notes": "x".repeat(64 * 1024)});
    let response = server.post_json("/v1/snitches", &big).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let response = server
        .patch_json(&format!("/v1/snitches/{token}"), &big)
        .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Just under the limit is read (and then refused for its notes, not its size).
    let body = format!(
        r#"{{"name":"n","interval":"daily","notes":"{}"}}"#,
        "x".repeat(64 * 1024 - 60)
    );
    assert!(body.len() <= 64 * 1024);
    let request = server
        .request(Method::POST, "/v1/snitches")
        .header(CONTENT_TYPE, "application/json")
        .body(body);
    assert_eq!(
        attributes(&assert_invalid(send(request).await).await),
        ["notes"]
    );
    assert_eq!(
        server.get_ok("/v1/snitches").await.as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn too_many_requests_are_429_rate_limited_per_key() {
    // The limiter reads the server's clock: time moves only when the test moves it.
    let clock = Arc::new(ManualClock::new(start_time()));
    let top = format!("rate_limit_per_second = 1\nrate_limit_burst = 2\n{MANUAL_TIME}");
    let server = Server::launch(&top, &default_cases(), clock.clone()).await;
    for _ in 0..2 {
        json_ok(server.get("/v1/snitches").await).await;
    }
    // The third request within the second is refused until a token is refilled.
    let response = server.get("/v1/snitches").await;
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .map(|v| v.to_str().expect("ascii").to_owned())
        .expect("Retry-After header");
    assert_eq!(retry_after, "1");
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    clock.advance(Duration::milliseconds(999));
    let response = server.get("/v1/snitches").await;
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // A second on, one token is back: one request, and only one.
    clock.advance(Duration::milliseconds(1));
    json_ok(server.get("/v1/snitches").await).await;
    let response = server.get("/v1/snitches").await;
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;

    // Other keys have their own buckets: another case's, and the same case's second key.
    for key in [OTHER_KEY, ACME_KEY_2] {
        let response = send(server.request_as(key, Method::GET, "/v1/snitches")).await;
        json_ok(response).await;
    }
    // Wrong keys are not counted against anyone and stay 401.
    let response = send(server.request_as(
        "wrong-key-000000000000000000000000000",
        Method::GET,
        "/v1/snitches",
    ))
    .await;
    assert_error(response, StatusCode::UNAUTHORIZED, "api_key_invalid").await;
}

#[tokio::test]
async fn maintenance_mode_is_503_while_check_ins_keep_working() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let top = format!("{NO_RATE_LIMIT}{MANUAL_TIME}maintenance = true\n");
    let server = Server::launch(&top, &default_cases(), clock).await;
    // A snitch from before the maintenance window.
    let case = server.case("acme").await;
    let fields = snitch::prelude::SnitchFields {
        name: Some("n".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let token = server
        .running
        .service
        .create(&case, &fields)
        .await
        .expect("created")
        .token()
        .to_string();

    for request in [
        server.request(Method::GET, "/v1/snitches"),
        server.request(Method::GET, &format!("/v1/snitches/{token}")),
        server
            .request(Method::POST, "/v1/snitches")
            .json(&json!({"name": "n", "interval": "daily"})),
        server.anonymous(Method::GET, "/v1/snitches"),
        server.request(Method::GET, "/v1/webhooks"),
    ] {
        assert_error(
            send(request).await,
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
        )
        .await;
    }
    let response = send(server.client.post(server.check_in_url(&token))).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    // Switched off at run time, the API answers again and shows the check-in.
    server.running.set_maintenance(false);
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "healthy");
    assert_eq!(snitch["checked_in_at"], "2026-11-22T03:00:00.123Z");
}

// ---------------------------------------------------------------------------------------
// Graceful shutdown

#[tokio::test]
async fn the_server_shuts_down_when_its_shutdown_future_completes() {
    let server = Server::start().await;
    let token = server.create_snitch("n", "daily").await;
    let api_addr = server.running.api_addr;
    let check_in_addr = server.running.check_in_addr;
    let check_in_url = server.check_in_url(&token);

    server.shut_down().await.expect("clean shutdown");

    for addr in [api_addr, check_in_addr] {
        let refused = tokio::net::TcpStream::connect(addr).await;
        assert!(refused.is_err(), "{addr} still accepts connections");
    }
    let fresh = reqwest::Client::new();
    assert!(fresh.get(check_in_url).send().await.is_err());
}

// ---------------------------------------------------------------------------------------
// Limits and time-dependent API behaviour

#[tokio::test]
async fn limits_give_a_validation_per_attribute() {
    let server = Server::start().await;
    let ok = server
        .create(json!({
            "name": "n".repeat(255),
            "interval": "daily",
            "tags": (0..50).map(|i| format!("{i:0>64}")).collect::<Vec<_>>(),
            "notes": "x".repeat(10_000),
            "alert_email": (0..20).map(|i| format!("u{i}@acme.test")).collect::<Vec<_>>(),
        }))
        .await;
    assert_eq!(ok["tags"].as_array().map(Vec::len), Some(50));
    assert_eq!(ok["alert_email"].as_array().map(Vec::len), Some(20));

    for (body, attribute) in [
        (json!({"name": "n".repeat(256)}), "name"),
        (json!({"tags": ["t".repeat(65)]}), "tags"),
        (
            json!({"tags": (0..51).map(|i| i.to_string()).collect::<Vec<_>>()}),
            "tags",
        ),
        (json!({"notes": "x".repeat(10_001)}), "notes"),
        (
            json!({"alert_email": (0..21).map(|i| format!("u{i}@acme.test")).collect::<Vec<_>>()}),
            "alert_email",
        ),
    ] {
        let mut create = body.clone();
        create["interval"] = json!("daily");
        if create.get("name").is_none() {
            create["name"] = json!("n");
        }
        let response = server.post_json("/v1/snitches", &create).await;
        assert_eq!(attributes(&assert_invalid(response).await), [attribute]);
        let path = format!("/v1/snitches/{}", token_of(&ok));
        let response = server.patch_json(&path, &body).await;
        assert_eq!(attributes(&assert_invalid(response).await), [attribute]);
    }
    // Adding a 51st tag is refused as well.
    let path = format!("/v1/snitches/{}/tags", token_of(&ok));
    let response = server.post_json(&path, &json!(["one-too-many"])).await;
    assert_eq!(attributes(&assert_invalid(response).await), ["tags"]);
    assert_eq!(
        server.get_ok("/v1/snitches").await.as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn unpause_restores_the_status_from_before_the_pause() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "hourly").await;
    let path = format!("/v1/snitches/{token}");
    server.check_in(&token, "").await;
    server.tick_at(&clock, at("2026-11-22T05:00:00.000Z")).await;
    assert_eq!(server.status_of(&token).await, "failed");

    assert_no_content(server.post_json(&format!("{path}/pause"), &json!({})).await).await;
    // No missing alerts while paused.
    server.tick_at(&clock, at("2026-11-22T09:10:00.000Z")).await;
    assert_no_content(send(server.request(Method::POST, &format!("{path}/unpause"))).await).await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "failed");
    // As if it had checked in at 09:10: due by 11:00.
    assert_eq!(snitch["deadline_at"], "2026-11-22T11:00:00.000Z");
    assert_eq!(
        server.event_types(&token).await,
        ["snitch.reporting", "snitch.missing", "snitch.paused"]
    );

    // An errored snitch comes back errored.
    server.check_in(&token, "s=1").await;
    assert_eq!(server.status_of(&token).await, "errored");
    assert_no_content(server.post_json(&format!("{path}/pause"), &json!({})).await).await;
    assert_no_content(send(server.request(Method::POST, &format!("{path}/unpause"))).await).await;
    assert_eq!(server.status_of(&token).await, "errored");
}

#[tokio::test]
async fn changing_the_interval_moves_the_deadline() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let token = server.create_snitch("n", "hourly").await;
    let path = format!("/v1/snitches/{token}");
    server.check_in(&token, "").await;
    assert_eq!(
        server.get_ok(&path).await["deadline_at"],
        "2026-11-22T05:00:00.000Z"
    );

    let updated = json_ok(
        server
            .patch_json(&path, &json!({"interval": "daily"}))
            .await,
    )
    .await;
    // Last check-in on the 22nd: due by the end of the 23rd.
    assert_eq!(updated["deadline_at"], "2026-11-24T00:00:00.000Z");
    server.tick_at(&clock, at("2026-11-22T05:00:00.000Z")).await;
    assert_eq!(server.status_of(&token).await, "healthy");

    let updated = json_ok(
        server
            .patch_json(&path, &json!({"interval": "15_minute"}))
            .await,
    )
    .await;
    // From 03:00:00.123: due by 03:30, already past, so the next sweep fails it.
    assert_eq!(updated["interval"], "15_minute");
    server
        .running
        .service
        .tick(clock.now())
        .await
        .expect("tick");
    assert_eq!(server.status_of(&token).await, "failed");
}

// ---------------------------------------------------------------------------------------
// What real clients send

/// Every API path answers the same with one trailing slash (the `snitchit` CLI sends
/// `/v1/snitches/`; Rails, which the reference service runs on, routes it).
#[tokio::test]
async fn every_api_path_answers_alike_with_a_trailing_slash() {
    let server = Server::start().await;
    let created = json_ok(
        server
            .post_json("/v1/snitches/", &json!({"name": "n", "interval": "daily"}))
            .await,
    )
    .await;
    let token = token_of(&created);
    let listed = json_ok(server.get("/v1/snitches/").await).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let one = json_ok(server.get(&format!("/v1/snitches/{token}/")).await).await;
    assert_eq!(one["token"], token.as_str());
    let tags = json_ok(
        server
            .post_json(&format!("/v1/snitches/{token}/tags/"), &json!(["a b", "c"]))
            .await,
    )
    .await;
    assert_eq!(tags, json!(["a b", "c"]));
    let left = json_ok(
        server
            .request(Method::DELETE, &format!("/v1/snitches/{token}/tags/a+b/"))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(left, json!(["c"]));
    for path in [
        format!("/v1/snitches/{token}/events/"),
        format!("/v1/snitches/{token}/check_ins/"),
        "/v1/webhooks/".to_owned(),
        "/v1/outages/".to_owned(),
    ] {
        let response = server.get(&path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    server.check_in(&token, "").await;
    assert_no_content(
        server
            .request(Method::POST, &format!("/v1/snitches/{token}/pause/"))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    assert_no_content(server.delete(&format!("/v1/snitches/{token}/")).await).await;
    // Two slashes are another path.
    let response = server.get("/v1/snitches//").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

/// Blank tags (`[""]`, what `snitchit` sends for "no tags") are dropped, not refused;
/// tags and names with control characters are refused, naming the attribute.
#[tokio::test]
async fn blank_tags_are_dropped_and_control_characters_refused() {
    let server = Server::start().await;
    let created = json_ok(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "n", "interval": "daily", "tags": ["", "  ", "db"]}),
            )
            .await,
    )
    .await;
    assert_eq!(created["tags"], json!(["db"]));
    let token = token_of(&created);
    let updated = json_ok(
        server
            .patch_json(&format!("/v1/snitches/{token}"), &json!({"tags": [""]}))
            .await,
    )
    .await;
    assert_eq!(updated["tags"], json!([]));

    let refused = assert_invalid(
        server
            .post_json(
                "/v1/snitches",
                &json!({"name": "a\r\nX-Inj: 1", "interval": "daily", "tags": ["a\r\nX-Inj: 1"]}),
            )
            .await,
    )
    .await;
    assert_eq!(
        refused,
        [
            (
                "name".to_owned(),
                "can't contain control characters".to_owned()
            ),
            (
                "tags".to_owned(),
                "can't contain control characters".to_owned()
            ),
        ]
    );
    let refused = assert_invalid(
        server
            .post_json(
                &format!("/v1/snitches/{token}/tags"),
                &json!(["ok", "tab\there"]),
            )
            .await,
    )
    .await;
    assert_eq!(attributes(&refused), ["tags"]);
    // Notes may hold line breaks.
    let noted = json_ok(
        server
            .patch_json(
                &format!("/v1/snitches/{token}"),
                &json!({"notes": "one\r\ntwo"}),
            )
            .await,
    )
    .await;
    assert_eq!(noted["notes"], "one\r\ntwo");
}

/// The array forms of PHP and Rails clients (`tags[]=a&tags[]=b`, `tags[0]=a`) filter the
/// list as `tags=a,b` does: every tag required.
#[tokio::test]
async fn array_forms_of_the_tag_filter_are_honoured() {
    let server = Server::start().await;
    for (name, tags) in [
        ("ab", json!(["a", "b"])),
        ("a", json!(["a"])),
        ("none", json!([])),
    ] {
        server
            .create(json!({"name": name, "interval": "daily", "tags": tags}))
            .await;
    }
    let names = |list: Value| -> Vec<String> {
        list.as_array()
            .expect("a list")
            .iter()
            .map(|s| s["name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    for (query, expected) in [
        ("tags=a,b", vec!["ab"]),
        ("tags[]=a&tags[]=b", vec!["ab"]),
        ("tags%5B%5D=a&tags%5B%5D=b", vec!["ab"]),
        ("tags[0]=a&tags[1]=b", vec!["ab"]),
        ("tags[]=a", vec!["ab", "a"]),
        ("tags[0]=a", vec!["ab", "a"]),
        ("tags=", vec!["ab", "a", "none"]),
        ("tags[]=", vec!["ab", "a", "none"]),
        ("other=x", vec!["ab", "a", "none"]),
    ] {
        let list = json_ok(server.get(&format!("/v1/snitches?{query}")).await).await;
        assert_eq!(names(list), expected, "{query}");
    }
}

// ---------------------------------------------------------------------------------------
// Schedule preview

/// `GET /v1/schedules/preview`: the next expected times of a cron expression in a zone,
/// in UTC and in the zone, with a note for the run a spring-forward gap moves.
#[tokio::test]
async fn a_schedule_preview_lists_the_next_runs_and_the_one_dst_moves() {
    let server = Server::start().await;
    let path = "/v1/schedules/preview?schedule=30+3+*+*+*&timezone=Europe/Riga\
                &after=2027-03-26T00:00:00Z&count=3";
    let preview = json_ok(server.get(path).await).await;
    assert_eq!(
        preview["times"],
        json!([
            "2027-03-26T01:30:00.000Z",
            "2027-03-27T01:30:00.000Z",
            "2027-03-28T01:00:00.000Z"
        ])
    );
    assert_eq!(
        preview["local"],
        json!([
            "2027-03-26T03:30:00.000+02:00",
            "2027-03-27T03:30:00.000+02:00",
            "2027-03-28T04:00:00.000+03:00"
        ])
    );
    let warnings = preview["warnings"].as_array().expect("a list");
    assert_eq!(warnings.len(), 1, "{preview}");
    assert!(
        warnings[0].as_str().unwrap_or("").contains("2027-03-28"),
        "{preview}"
    );
    // `tz` is an alias; `count` defaults to 5; a macro works.
    let daily = json_ok(
        server
            .get("/v1/schedules/preview?schedule=@daily&tz=Asia/Kathmandu&after=2026-01-01T00:00:00Z")
            .await,
    )
    .await;
    assert_eq!(daily["times"].as_array().map(Vec::len), Some(5));
    assert_eq!(daily["times"][0], "2026-01-01T18:15:00.000Z");
    assert_eq!(daily["local"][0], "2026-01-02T00:00:00.000+05:45");
    assert_eq!(daily["warnings"], json!([]));
    // With a trailing slash too.
    let again = server
        .get("/v1/schedules/preview/?schedule=*/15+*+*+*+*")
        .await;
    assert_eq!(again.status(), StatusCode::OK);
}

/// Every bad parameter of a preview is a 422 naming it, all at once; never a 500.
#[tokio::test]
async fn a_bad_schedule_preview_names_each_bad_parameter() {
    let server = Server::start().await;
    for (query, expected) in [
        ("schedule=%40reboot", vec!["schedule"]),
        ("schedule=*+*+*+*+*+*", vec!["schedule"]),
        ("schedule=*+*+30+2+*", vec!["schedule"]),
        ("schedule=a%00b", vec!["schedule"]),
        ("", vec!["schedule"]),
        ("schedule=@daily&timezone=Mars/Base", vec!["timezone"]),
        (
            "schedule=@daily&count=0&after=yesterday",
            vec!["after", "count"],
        ),
        ("schedule=@daily&count=101", vec!["count"]),
        ("schedule=@daily&count=-1", vec!["count"]),
    ] {
        let invalid =
            assert_invalid(server.get(&format!("/v1/schedules/preview?{query}")).await).await;
        let mut named = attributes(&invalid);
        named.sort_unstable();
        assert_eq!(named, expected, "{query}: {invalid:?}");
    }
    let anonymous = server
        .anonymous(Method::GET, "/v1/schedules/preview?schedule=@daily")
        .send()
        .await
        .expect("answered");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

// ---------------------------------------------------------------------------------------
// Cron schedules (docs/rules.md#expected-runs)

#[tokio::test]
async fn a_cron_snitch_is_made_shown_and_due_at_its_run_plus_grace() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = Server::start_with_clock(clock.clone()).await;
    let snitch = server
        .create(json!({
            "name": "Nightly backup",
            "schedule": "30 2 * * *",
            "tz": "Europe/Riga",
            "grace_seconds": 1800,
        }))
        .await;
    assert_eq!(snitch["interval"], "cron");
    assert_eq!(snitch["type"], json!({"interval": "cron"}));
    assert_eq!(snitch["schedule"], "30 2 * * *");
    assert_eq!(snitch["timezone"], "Europe/Riga");
    assert_eq!(snitch["grace_seconds"], 1800);
    assert_eq!(snitch["early_seconds"], 60, "the default");
    assert_eq!(snitch["deadline_at"], Value::Null, "pending");
    // Pending: the schedule's next run after now (2026-11-22 03:00 UTC, 05:00 in Riga).
    assert_eq!(snitch["next_expected_at"], "2026-11-23T00:30:00.000Z");
    let token = token_of(&snitch);
    let path = format!("/v1/snitches/{token}");
    assert_eq!(server.get_ok(&path).await, snitch);

    // 2026-11-23 00:29 UTC is 02:29 in Riga: a minute early counts for the 02:30 run.
    server
        .tick_at(&clock, "2026-11-23T00:29:30Z".parse().expect("valid"))
        .await;
    server.check_in(&token, "").await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "healthy");
    assert_eq!(snitch["next_expected_at"], "2026-11-24T00:30:00.000Z");
    assert_eq!(snitch["deadline_at"], "2026-11-24T01:00:00.000Z");

    // Silent that night: failed once its grace has passed, not before.
    server
        .tick_at(&clock, "2026-11-24T00:59:59Z".parse().expect("valid"))
        .await;
    assert_eq!(server.get_ok(&path).await["status"], "healthy");
    server
        .tick_at(&clock, "2026-11-24T01:00:00Z".parse().expect("valid"))
        .await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(snitch["status"], "failed");
    assert_eq!(snitch["deadline_at"], "2026-11-25T01:00:00.000Z");
}

#[tokio::test]
async fn a_dms_snitch_shows_none_of_the_schedule_fields() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({"name": "n", "interval": "daily"}))
        .await;
    for field in [
        "schedule",
        "timezone",
        "grace_seconds",
        "early_seconds",
        "next_expected_at",
        "failure_tolerance",
        "missed_tolerance",
    ] {
        assert!(snitch.get(field).is_none(), "{field} in {snitch}");
    }
}

#[tokio::test]
async fn tolerances_are_set_shown_and_checked() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({"name": "n", "interval": "hourly", "failure_tolerance": 3}))
        .await;
    assert_eq!(snitch["failure_tolerance"], 3);
    assert_eq!(snitch["missed_tolerance"], 0);
    let path = format!("/v1/snitches/{}", token_of(&snitch));
    let updated = json_ok(
        server
            .patch_json(&path, &json!({"missed_tolerance": 720}))
            .await,
    )
    .await;
    assert_eq!(updated["failure_tolerance"], 3, "kept");
    assert_eq!(updated["missed_tolerance"], 720);
    for (body, attribute) in [
        (json!({"failure_tolerance": 721}), "failure_tolerance"),
        (json!({"missed_tolerance": -1}), "missed_tolerance"),
        (json!({"missed_tolerance": "2"}), "missed_tolerance"),
        (json!({"failure_tolerance": 1.5}), "failure_tolerance"),
    ] {
        let validations = assert_invalid(server.patch_json(&path, &body).await).await;
        assert_eq!(attributes(&validations), [attribute], "{body}");
    }
    assert_eq!(server.get_ok(&path).await, updated);
    // Back to none: the fields leave the JSON of an interval snitch.
    let cleared = json_ok(
        server
            .patch_json(
                &path,
                &json!({"failure_tolerance": 0, "missed_tolerance": 0}),
            )
            .await,
    )
    .await;
    assert!(cleared.get("failure_tolerance").is_none(), "{cleared}");
}

#[tokio::test]
async fn schedule_problems_are_422s_naming_the_attribute() {
    let server = Server::start().await;
    for (body, attribute, message) in [
        (
            json!({"name": "n", "interval": "daily", "schedule": "@daily"}),
            "schedule",
            "can't be set together with an interval",
        ),
        (
            json!({"name": "n", "schedule": "@reboot"}),
            "schedule",
            "@reboot is not supported",
        ),
        (
            json!({"name": "n", "schedule": "0 0 * * * *"}),
            "schedule",
            "seconds are not supported",
        ),
        (
            json!({"name": "n", "schedule": "* * 30 2 *"}),
            "schedule",
            "does not exist in February",
        ),
        (
            json!({"name": "n", "schedule": "0 \u{0} * * *"}),
            "schedule",
            "can't contain a NUL character",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "timezone": "Mars/Olympus"}),
            "timezone",
            "is not a known time zone",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "grace_seconds": 59}),
            "grace_seconds",
            "must be between 60 and 31536000 seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "early_seconds": 3601}),
            "early_seconds",
            "must be between 0 and 3600 seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "grace_seconds": 1.5}),
            "grace_seconds",
            "must be a whole number of seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "grace_seconds": i64::MAX}),
            "grace_seconds",
            "must be between 60 and 31536000 seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "early_seconds": i64::MIN}),
            "early_seconds",
            "must be between 0 and 3600 seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "grace_seconds": 1e300}),
            "grace_seconds",
            "must be a whole number of seconds",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "alert_type": "smart"}),
            "alert_type",
            "smart alerts need an interval",
        ),
        (
            json!({"name": "n", "interval": "daily", "timezone": "UTC"}),
            "timezone",
            "can only be set with a schedule",
        ),
        (
            json!({"name": "n", "schedule": "x".repeat(101)}),
            "schedule",
            "is too long",
        ),
        (
            json!({"name": "n", "schedule": "@daily", "timezone": "Europe/\u{0}Riga"}),
            "timezone",
            "is not a known time zone",
        ),
    ] {
        let validations = assert_invalid(server.post_json("/v1/snitches", &body).await).await;
        let (_, text) = validations
            .iter()
            .find(|(a, _)| a == attribute)
            .unwrap_or_else(|| panic!("{body}: no problem with {attribute}: {validations:?}"));
        assert!(text.contains(message), "{body}: {text}");
    }
    assert_eq!(
        server.get_ok("/v1/snitches").await,
        json!([]),
        "nothing made"
    );
}

#[tokio::test]
async fn an_update_changes_the_zone_alone_or_turns_a_cron_snitch_into_an_interval_one() {
    let server = Server::start().await;
    let snitch = server
        .create(json!({"name": "n", "schedule": "0 9 * * MON-FRI", "grace_seconds": 900}))
        .await;
    assert_eq!(snitch["timezone"], "UTC", "the default zone");
    let path = format!("/v1/snitches/{}", token_of(&snitch));

    let moved = json_ok(
        server
            .patch_json(&path, &json!({"timezone": "America/New_York"}))
            .await,
    )
    .await;
    assert_eq!(moved["schedule"], "0 9 * * MON-FRI");
    assert_eq!(moved["timezone"], "America/New_York");
    assert_eq!(moved["grace_seconds"], 900, "kept");

    let validations = assert_invalid(
        server
            .patch_json(&path, &json!({"grace_seconds": 10}))
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["grace_seconds"]);

    let hourly = json_ok(
        server
            .patch_json(&path, &json!({"interval": "hourly"}))
            .await,
    )
    .await;
    assert_eq!(hourly["interval"], "hourly");
    assert!(hourly.get("schedule").is_none(), "{hourly}");
    let validations = assert_invalid(
        server
            .patch_json(&path, &json!({"early_seconds": 30}))
            .await,
    )
    .await;
    assert_eq!(attributes(&validations), ["early_seconds"]);
}
