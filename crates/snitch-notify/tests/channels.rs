//! Vendor channels end to end: every kind's delivery goes through `ChannelNotifier` to a
//! stand-in of the vendor on 127.0.0.1, which records each request and answers from a
//! script. The requests are checked against what each vendor documents: method, path,
//! headers, body shape and limits; the answers against what they mean (success,
//! transient with the vendor's wait, permanent with the vendor's reason).

use std::collections::VecDeque;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use snitch_core::clock::monotonic_now;
use snitch_core::{
    AlertEmails, CaseId, Channel, ChannelConfig, ChannelKey, ChannelKind, ChannelSettings, CheckIn,
    CheckInMessage, Delivery, DeliveryState, Event, EventFilter, EventKind, Notes, Notifier,
    NotifyError, Outcome, SnitchName, Status, Tags, Token,
};
use snitch_notify::channels::{alert_link, derived_ref, ChannelNotifier};
use snitch_notify::webhook::WebhookOptions;

/// The snitch's token: a secret no request may carry.
const TOKEN: &str = "tokn4secret8abcxyz0";
/// The channels' key.
const KEY: &str = "k3yk3yk3yk3yk3yk3yk3y";
/// The server's public URL, for the links messages carry.
const DASHBOARD: &str = "https://snitch.example";
/// What a hostile job could name itself or say in a check-in.
const HOSTILE: &str =
    "<!channel> @everyone @here <@U123> [click](https://evil.test) <b>x</b> *bold*";
/// U+2060 WORD JOINER, which the notifier puts after every `@`.
const JOINER: char = '\u{2060}';

// ---------------------------------------------------------------------------------------
// The stand-in
// ---------------------------------------------------------------------------------------

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    /// Path and query, as sent.
    uri: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header"))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// How the stand-in answers one request.
#[derive(Debug, Clone)]
enum Answer {
    Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Never answers.
    Hang,
}

fn reply(status: u16, body: &str) -> Answer {
    Answer::Reply {
        status,
        headers: Vec::new(),
        body: body.to_owned(),
    }
}

fn json_reply(status: u16, body: Value) -> Answer {
    Answer::Reply {
        status,
        headers: vec![("content-type", "application/json".to_owned())],
        body: body.to_string(),
    }
}

#[derive(Debug)]
struct Script {
    seen: Vec<Seen>,
    next: VecDeque<Answer>,
    default: Answer,
}

#[derive(Debug, Clone)]
struct StandIn {
    base: String,
    script: Arc<Mutex<Script>>,
}

impl StandIn {
    /// A stand-in on 127.0.0.1 answering `default` unless a scripted answer is queued.
    async fn start(default: Answer) -> StandIn {
        let script = Arc::new(Mutex::new(Script {
            seen: Vec::new(),
            next: VecDeque::new(),
            default,
        }));
        let app = Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&script));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("bound").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        StandIn {
            base: format!("http://127.0.0.1:{port}"),
            script,
        }
    }

    /// A stand-in of `kind` answering as the vendor does on success.
    async fn vendor(kind: ChannelKind) -> StandIn {
        StandIn::start(vendor_success(kind)).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The next requests get these answers, in order.
    fn then(&self, answer: Answer) {
        self.script
            .lock()
            .expect("not poisoned")
            .next
            .push_back(answer);
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().expect("not poisoned").seen.clone()
    }

    fn count(&self) -> usize {
        self.script.lock().expect("not poisoned").seen.len()
    }

    fn last(&self) -> Seen {
        self.seen().pop().expect("a request arrived")
    }
}

async fn answer(
    State(script): State<Arc<Mutex<Script>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let answer = {
        let mut script = script.lock().expect("not poisoned");
        script.seen.push(Seen {
            method,
            uri: uri.to_string(),
            headers,
            body: body.to_vec(),
        });
        match script.next.pop_front() {
            Some(answer) => answer,
            None => script.default.clone(),
        }
    };
    match answer {
        Answer::Hang => pending().await,
        Answer::Reply {
            status,
            headers,
            body,
        } => {
            let mut response =
                (StatusCode::from_u16(status).expect("a status"), body).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value).expect("a header value"),
                );
            }
            response
        }
    }
}

/// Each vendor's documented answer to a successful call.
fn vendor_success(kind: ChannelKind) -> Answer {
    match kind {
        // Incoming webhooks answer `ok` as text.
        ChannelKind::Slack | ChannelKind::Mattermost => reply(200, "ok"),
        // Discord: 204 without `?wait=true`.
        ChannelKind::Discord => reply(204, ""),
        // Teams Workflows: 202 Accepted.
        ChannelKind::Teams => reply(202, ""),
        ChannelKind::GoogleChat => json_reply(
            200,
            json!({"name": "spaces/AAAA/messages/BBBB.BBBB", "text": "…",
                   "createTime": "2026-11-22T10:15:01.123456Z"}),
        ),
        ChannelKind::Pagerduty => json_reply(
            202,
            json!({"status": "success", "message": "Event processed",
                   "dedup_key": "srv01/mysql"}),
        ),
        ChannelKind::Opsgenie => json_reply(
            202,
            json!({"result": "Request will be processed", "took": 0.302,
                   "requestId": "43a29c5c-3dbf-4fa4-9c26-f4f71023e120"}),
        ),
        ChannelKind::Telegram => json_reply(
            200,
            json!({"ok": true, "result": {"message_id": 42, "date": 1_795_000_000,
                   "chat": {"id": -1_001_234_567_890_i64, "type": "supergroup"}, "text": "…"}}),
        ),
        ChannelKind::Ntfy => json_reply(
            200,
            json!({"id": "sPs71M8A2T", "time": 1_795_000_000, "expires": 1_795_043_200,
                   "event": "message", "topic": "snitch-alerts", "message": "…"}),
        ),
        ChannelKind::Pushover => json_reply(
            200,
            json!({"status": 1, "request": "647d2300-702c-4b38-8b2f-d56326ae460b"}),
        ),
        ChannelKind::Matrix => json_reply(200, json!({"event_id": "$YUwRidLecu:example.com"})),
        other => panic!("no stand-in for {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// Channels, events, deliveries
// ---------------------------------------------------------------------------------------

/// The kinds that speak a vendor's API.
const VENDOR_KINDS: [ChannelKind; 11] = [
    ChannelKind::Slack,
    ChannelKind::Mattermost,
    ChannelKind::Discord,
    ChannelKind::Teams,
    ChannelKind::GoogleChat,
    ChannelKind::Pagerduty,
    ChannelKind::Opsgenie,
    ChannelKind::Telegram,
    ChannelKind::Ntfy,
    ChannelKind::Pushover,
    ChannelKind::Matrix,
];

const PD_ROUTING_KEY: &str = "R0123456789abcdef0123456789abcde";
const OG_API_KEY: &str = "eb243592-faa2-4ba2-a551q-1afdf565c889";
const TG_BOT_TOKEN: &str = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11";
const TG_CHAT_ID: &str = "-1001234567890";
const PO_APP_TOKEN: &str = "azGDORePK8gMaC0QOYAMyEEuzJnyUi";
const PO_USER_KEY: &str = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG";
const MX_ROOM: &str = "!AbCdEf:matrix.example";
const MX_ACCESS_TOKEN: &str = "syt_c25pdGNo_secretsecret_0a1b2c";

fn key() -> ChannelKey {
    ChannelKey::parse(KEY).expect("a channel key")
}

fn settings(kind: ChannelKind, given: &[(&str, String)]) -> ChannelSettings {
    ChannelSettings::parse(kind, given.iter().map(|(n, v)| (*n, v.as_str())))
        .unwrap_or_else(|e| panic!("valid {kind} settings: {e:?}"))
}

/// Settings of a `kind` channel whose every URL points at `standin`.
fn settings_for(kind: ChannelKind, standin: &StandIn) -> ChannelSettings {
    let s = |given: &[(&str, String)]| settings(kind, given);
    match kind {
        ChannelKind::Slack => s(&[(
            "url",
            standin.url("/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
        )]),
        ChannelKind::Mattermost => s(&[("url", standin.url("/hooks/xxx-generatedkey-xxx"))]),
        ChannelKind::Discord => s(&[("url", standin.url("/api/webhooks/123456/abcdef"))]),
        ChannelKind::Teams => s(&[(
            "url",
            standin.url("/workflows/abc/triggers/manual/paths/invoke?api-version=1&sig=s1g"),
        )]),
        ChannelKind::GoogleChat => s(&[(
            "url",
            standin.url("/v1/spaces/AAAA/messages?key=k3y&token=t0k"),
        )]),
        ChannelKind::Pagerduty => s(&[
            ("routing_key", PD_ROUTING_KEY.to_owned()),
            ("api_url", standin.url("/v2/enqueue")),
        ]),
        ChannelKind::Opsgenie => s(&[
            ("api_key", OG_API_KEY.to_owned()),
            ("api_url", standin.base.clone()),
            ("priority", "P1".to_owned()),
        ]),
        ChannelKind::Telegram => s(&[
            ("bot_token", TG_BOT_TOKEN.to_owned()),
            ("chat_id", TG_CHAT_ID.to_owned()),
            ("api_url", standin.base.clone()),
        ]),
        ChannelKind::Ntfy => s(&[
            ("topic", "snitch-alerts".to_owned()),
            ("server", standin.base.clone()),
        ]),
        ChannelKind::Pushover => s(&[
            ("app_token", PO_APP_TOKEN.to_owned()),
            ("user_key", PO_USER_KEY.to_owned()),
            ("api_url", standin.url("/1/messages.json")),
        ]),
        ChannelKind::Matrix => s(&[
            ("homeserver", standin.base.clone()),
            ("room_id", MX_ROOM.to_owned()),
            ("access_token", MX_ACCESS_TOKEN.to_owned()),
        ]),
        other => panic!("not a vendor kind: {other}"),
    }
}

fn at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T10:15:00.25Z")
        .expect("valid")
        .to_utc()
}

/// The `n`-th event of the snitch, of `kind`.
fn event(kind: EventKind, n: u64) -> Event {
    let (status, previous_status) = match kind {
        EventKind::Missing => (Status::Failed, Status::Healthy),
        EventKind::Errored => (Status::Errored, Status::Healthy),
        EventKind::Reporting => (Status::Healthy, Status::Failed),
        _ => (Status::Paused, Status::Healthy),
    };
    let check_in = match kind {
        EventKind::Errored => Some(CheckIn::new(
            at(),
            Outcome::from_exit_status(Some("2")),
            CheckInMessage::truncating("disk full"),
        )),
        EventKind::Reporting => Some(CheckIn::new(at(), Outcome::Success, None)),
        _ => None,
    };
    Event {
        id: format!("{TOKEN}-{n}"),
        kind,
        at: at(),
        case_id: CaseId::parse("acme").expect("valid"),
        token: Token::parse(TOKEN).expect("valid"),
        name: SnitchName::parse("Nightly backup").expect("valid"),
        notes: Notes::parse("Call Bob").expect("valid"),
        tags: Tags::parse(&["db", "nightly"]).expect("valid"),
        alert_email: AlertEmails::default(),
        status,
        previous_status,
        checked_in_at: Some(at() - chrono::Duration::days(1)),
        check_in,
        missed_periods: 1,
        expected_at: Some(at() - chrono::Duration::minutes(15)),
        expected_at_local: None,
        reason: None,
        run: None,
    }
}

/// A `snitch.missing` event whose name and check-in message are hostile.
fn hostile_event(n: u64) -> Event {
    let mut e = event(EventKind::Missing, n);
    e.name = SnitchName::parse(HOSTILE).expect("a valid name");
    e.notes = Notes::parse(HOSTILE).expect("valid notes");
    e.check_in = Some(CheckIn::new(
        at(),
        Outcome::Success,
        CheckInMessage::truncating(HOSTILE),
    ));
    e
}

fn delivery(event: Event, channel_id: &str, settings: &ChannelSettings) -> Delivery {
    delivery_numbered(event, 1, channel_id, settings)
}

fn delivery_numbered(
    event: Event,
    m: u64,
    channel_id: &str,
    settings: &ChannelSettings,
) -> Delivery {
    Delivery {
        id: format!("{}-{m}", event.id),
        event,
        channel: Channel::Native {
            channel_id: channel_id.to_owned(),
            settings: settings.clone(),
            key: key(),
        },
        state: DeliveryState::Pending,
        next_attempt_at: None,
        attempts: Vec::new(),
    }
}

fn notifier_with_timeout(timeout: Duration) -> ChannelNotifier {
    ChannelNotifier::new(
        WebhookOptions::default()
            .with_allow_private(true)
            .with_timeout(timeout),
    )
    .expect("client builds")
    .with_dashboard(Some(DASHBOARD.to_owned()))
}

fn notifier() -> ChannelNotifier {
    notifier_with_timeout(Duration::from_secs(10))
}

fn channel_config(id: &str, settings: ChannelSettings) -> ChannelConfig {
    ChannelConfig {
        id: id.to_owned(),
        case_id: CaseId::parse("acme").expect("valid"),
        name: Some("Ops pager".to_owned()),
        settings,
        events: EventFilter::DEFAULT,
        tags: Tags::default(),
        key: key(),
        created_at: at(),
    }
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

fn assert_permanent(result: Result<String, NotifyError>, reason: &str) -> NotifyError {
    let err = result.expect_err("refused");
    assert!(err.permanent, "{err:?}");
    assert_eq!(err.retry_after, None, "{err:?}");
    assert!(err.detail.contains(reason), "{reason:?} not in {err:?}");
    err
}

fn assert_retry_after(result: Result<String, NotifyError>, wait: chrono::Duration) -> NotifyError {
    let err = result.expect_err("rate limited");
    assert!(!err.permanent, "{err:?}");
    assert_eq!(err.retry_after, Some(wait), "{err:?}");
    err
}

fn assert_json_post(seen: &Seen) -> Value {
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.header("content-type"), Some("application/json"));
    seen.json()
}

/// Every string in a JSON value, keys included.
fn strings(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (k, v) in map {
                    out.push(k.clone());
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

/// No text of the request can mention anyone: no `<@U123>` (Slack's and Discord's user
/// mention), no bare `@everyone`/`@here`; every `@` is followed by the word joiner.
/// (`<!channel>` is checked where a vendor parses it: Slack's mrkdwn.)
fn assert_no_mention(texts: &[String]) {
    for text in texts {
        for bad in ["<@U123>", "@everyone", "@here", "@U123"] {
            assert!(!text.contains(bad), "{bad:?} in {text:?}");
        }
        for (i, _) in text.match_indices('@') {
            assert_eq!(
                text[i + 1..].chars().next(),
                Some(JOINER),
                "an @ without the word joiner in {text:?}"
            );
        }
    }
}

/// The markup tags of `html`: every `<…>`.
fn tags_of(html: &str) -> Vec<&str> {
    let mut tags = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        let end = rest[start..]
            .find('>')
            .unwrap_or_else(|| panic!("an unclosed tag in {html:?}"));
        tags.push(&rest[start..start + end + 1]);
        rest = &rest[start + end + 1..];
    }
    assert!(!rest.contains('>'), "a stray > in {html:?}");
    tags
}

/// `html` uses only these tags (and `<a href="…">`), and every `&` starts an entity.
fn assert_html_only(html: &str, allowed: &[&str]) {
    for tag in tags_of(html) {
        let link = tag.starts_with("<a href=\"") && tag.ends_with("\">") && {
            let href = &tag["<a href=\"".len()..tag.len() - 2];
            !href.contains('"') && href.starts_with(DASHBOARD)
        };
        assert!(
            link || allowed.contains(&tag),
            "tag {tag:?} not allowed in {html:?}"
        );
    }
    for (i, _) in html.match_indices('&') {
        let entity = ["&lt;", "&gt;", "&amp;", "&quot;"]
            .iter()
            .any(|e| html[i..].starts_with(e));
        assert!(entity, "a bare & in {html:?}");
    }
}

/// Every part of every request this stand-in saw: the token is in none.
fn assert_token_absent(standin: &StandIn) {
    for seen in standin.seen() {
        assert!(!seen.uri.contains(TOKEN), "token in {}", seen.uri);
        for (name, value) in &seen.headers {
            assert!(
                !value
                    .as_bytes()
                    .windows(TOKEN.len())
                    .any(|w| w == TOKEN.as_bytes()),
                "token in header {name}"
            );
        }
        assert!(
            !seen
                .body
                .windows(TOKEN.len())
                .any(|w| w == TOKEN.as_bytes()),
            "token in body {}",
            String::from_utf8_lossy(&seen.body)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Slack
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn slack_posts_blocks_and_honours_its_rate_limit_per_channel() {
    let standin = StandIn::vendor(ChannelKind::Slack).await;
    let n = notifier();
    let slack = settings_for(ChannelKind::Slack, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chslack1", &slack);

    assert_eq!(n.send(&d).await, Ok("slack answered HTTP 200".to_owned()));
    let seen = standin.last();
    assert_eq!(
        seen.uri,
        "/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    );
    let body = assert_json_post(&seen);
    let text = body["text"].as_str().expect("text");
    assert!(
        text.contains("Nightly backup") && text.contains("is missing"),
        "{text}"
    );
    let blocks = body["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty() && blocks.len() <= 50, "{blocks:?}");
    let header = &blocks[0];
    assert_eq!(header["type"], "header");
    assert_eq!(header["text"]["type"], "plain_text");
    let title = header["text"]["text"].as_str().expect("header text");
    assert!(title.chars().count() <= 150, "{title}");
    assert_eq!(title, "MISSING: Nightly backup");
    let link = alert_link(DASHBOARD, "chslack1", &derived_ref(&key(), TOKEN));
    assert!(body.to_string().contains(&link), "{body}");

    // 429 with Retry-After: 2 s, then the channel is held without a request.
    standin.then(Answer::Reply {
        status: 429,
        headers: vec![("retry-after", "2".to_owned())],
        body: "rate_limited".to_owned(),
    });
    assert_retry_after(n.send(&d).await, chrono::Duration::seconds(2));
    let before = standin.count();
    let held = n.send(&d).await.expect_err("held");
    assert!(!held.permanent, "{held:?}");
    let wait = held.retry_after.expect("a wait");
    assert!(
        wait > chrono::Duration::zero() && wait <= chrono::Duration::seconds(2),
        "{held:?}"
    );
    assert_eq!(standin.count(), before, "a held channel sent a request");

    // Another channel on the same stand-in still sends.
    let other = delivery(event(EventKind::Missing, 3), "chslack2", &slack);
    assert_eq!(
        n.send(&other).await,
        Ok("slack answered HTTP 200".to_owned())
    );
    assert_eq!(standin.count(), before + 1);

    // 404 no_service: the webhook is gone.
    standin.then(reply(404, "no_service"));
    assert_permanent(n.send(&other).await, "no_service");
    assert_token_absent(&standin);
}

#[tokio::test]
async fn slack_header_stays_within_150_characters() {
    let standin = StandIn::vendor(ChannelKind::Slack).await;
    let slack = settings_for(ChannelKind::Slack, &standin);
    let mut e = event(EventKind::Missing, 3);
    e.name = SnitchName::parse(&"x".repeat(255)).expect("a long name");
    notifier()
        .send(&delivery(e, "chslack1", &slack))
        .await
        .expect("sent");
    let body = standin.last().json();
    let title = body["blocks"][0]["text"]["text"].as_str().expect("header");
    assert!(
        title.chars().count() <= 150,
        "{} chars",
        title.chars().count()
    );
    for block in body["blocks"].as_array().expect("blocks") {
        if let Some(text) = block["text"]["text"].as_str() {
            assert!(text.chars().count() <= 3000);
        }
    }
}

/// Slack's limits are on the text Slack receives; the word joiners added after `@` count.
#[tokio::test]
async fn slack_limits_count_the_word_joiners() {
    let standin = StandIn::vendor(ChannelKind::Slack).await;
    let slack = settings_for(ChannelKind::Slack, &standin);
    let mut e = event(EventKind::Missing, 3);
    e.name = SnitchName::parse(&"@".repeat(255)).expect("a name of @s");
    e.notes = Notes::parse(&"@".repeat(2000)).expect("notes of @s");
    notifier()
        .send(&delivery(e, "chslack1", &slack))
        .await
        .expect("sent");
    let body = standin.last().json();
    let title = body["blocks"][0]["text"]["text"].as_str().expect("header");
    assert!(
        title.chars().count() <= 150,
        "header of {} chars",
        title.chars().count()
    );
    for block in body["blocks"].as_array().expect("blocks") {
        for field in block["fields"].as_array().into_iter().flatten() {
            let text = field["text"].as_str().expect("field text");
            assert!(
                text.chars().count() <= 2000,
                "field of {} chars",
                text.chars().count()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mattermost, Discord, Teams, Google Chat
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mattermost_posts_text() {
    let standin = StandIn::vendor(ChannelKind::Mattermost).await;
    let mm = settings_for(ChannelKind::Mattermost, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chmm1", &mm);
    assert_eq!(
        notifier().send(&d).await,
        Ok("mattermost answered HTTP 200".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, "/hooks/xxx-generatedkey-xxx");
    let body = assert_json_post(&seen);
    let text = body["text"].as_str().expect("text");
    assert!(
        text.contains("Nightly backup") && text.contains("is missing"),
        "{text}"
    );
    standin.then(reply(400, "Unable to parse incoming data"));
    assert_permanent(notifier().send(&d).await, "Unable to parse incoming data");
    assert_token_absent(&standin);
}

#[tokio::test]
async fn discord_posts_an_embed_without_mentions() {
    let standin = StandIn::vendor(ChannelKind::Discord).await;
    let n = notifier();
    let discord = settings_for(ChannelKind::Discord, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chdc1", &discord);

    assert_eq!(n.send(&d).await, Ok("discord answered HTTP 204".to_owned()));
    let seen = standin.last();
    assert_eq!(seen.uri, "/api/webhooks/123456/abcdef");
    let body = assert_json_post(&seen);
    let embed = &body["embeds"][0];
    assert_eq!(embed["title"], "MISSING: Nightly backup");
    assert!(embed["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(embed["color"].is_u64(), "{embed}");
    assert!(embed["color"].as_u64().is_some_and(|c| c <= 0xFF_FF_FF));
    assert_eq!(body["allowed_mentions"], json!({"parse": []}));
    for field in embed["fields"].as_array().expect("fields") {
        assert!(field["name"]
            .as_str()
            .is_some_and(|n| n.chars().count() <= 256));
        assert!(field["value"]
            .as_str()
            .is_some_and(|v| v.chars().count() <= 1024));
    }

    // 429 with Discord's body: retry_after in (fractional) seconds.
    standin.then(json_reply(
        429,
        json!({"message": "You are being rate limited.", "retry_after": 1.5, "global": false}),
    ));
    assert_retry_after(n.send(&d).await, chrono::Duration::milliseconds(1500));

    // 404: the webhook was deleted.
    let gone = delivery(event(EventKind::Missing, 3), "chdc2", &discord);
    standin.then(json_reply(
        404,
        json!({"message": "Unknown Webhook", "code": 10015}),
    ));
    assert_permanent(n.send(&gone).await, "Unknown Webhook");
    assert_token_absent(&standin);
}

/// Discord refuses an embed field value over 1024 characters.
#[tokio::test]
async fn discord_field_values_stay_within_1024_characters() {
    let standin = StandIn::vendor(ChannelKind::Discord).await;
    let discord = settings_for(ChannelKind::Discord, &standin);
    let mut e = event(EventKind::Missing, 3);
    e.notes = Notes::parse(&"v1.2.3-rc.4 ".repeat(100)).expect("notes");
    notifier()
        .send(&delivery(e, "chdc1", &discord))
        .await
        .expect("sent");
    let body = standin.last().json();
    for field in body["embeds"][0]["fields"].as_array().expect("fields") {
        let value = field["value"].as_str().expect("value");
        assert!(
            value.chars().count() <= 1024,
            "a value of {} chars",
            value.chars().count()
        );
    }
}

#[tokio::test]
async fn teams_posts_an_adaptive_card() {
    let standin = StandIn::vendor(ChannelKind::Teams).await;
    let teams = settings_for(ChannelKind::Teams, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chteams1", &teams);
    assert_eq!(
        notifier().send(&d).await,
        Ok("teams answered HTTP 202".to_owned())
    );
    let seen = standin.last();
    assert_eq!(
        seen.uri,
        "/workflows/abc/triggers/manual/paths/invoke?api-version=1&sig=s1g"
    );
    let body = assert_json_post(&seen);
    assert_eq!(body["type"], "message");
    let attachment = &body["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    assert!(
        card["version"].as_str().is_some_and(|v| !v.is_empty()),
        "{card}"
    );
    let blocks = card["body"].as_array().expect("a card body");
    let texts: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "TextBlock").collect();
    assert!(!texts.is_empty());
    for block in texts {
        assert_eq!(block["wrap"], true, "{block}");
        assert!(block["text"].as_str().is_some_and(|t| !t.is_empty()));
    }
    assert_token_absent(&standin);
}

#[tokio::test]
async fn google_chat_posts_text() {
    let standin = StandIn::vendor(ChannelKind::GoogleChat).await;
    let chat = settings_for(ChannelKind::GoogleChat, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chgc1", &chat);
    assert_eq!(
        notifier().send(&d).await,
        Ok("google_chat answered HTTP 200".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, "/v1/spaces/AAAA/messages?key=k3y&token=t0k");
    let body = assert_json_post(&seen);
    let text = body["text"].as_str().expect("text");
    assert!(
        text.contains("Nightly backup") && text.contains("is missing"),
        "{text}"
    );
    standin.then(json_reply(
        404,
        json!({"error": {"code": 404, "message": "Requested entity was not found.",
                         "status": "NOT_FOUND"}}),
    ));
    assert!(notifier().send(&d).await.expect_err("gone").permanent);
    assert_token_absent(&standin);
}

// ---------------------------------------------------------------------------------------
// PagerDuty
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn pagerduty_triggers_and_resolves_with_one_dedup_key() {
    let standin = StandIn::vendor(ChannelKind::Pagerduty).await;
    let n = notifier();
    let pd = settings_for(ChannelKind::Pagerduty, &standin);
    let trigger = delivery(event(EventKind::Missing, 3), "chpd1", &pd);

    assert_eq!(
        n.send(&trigger).await,
        Ok("pagerduty answered HTTP 202".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, "/v2/enqueue");
    let body = assert_json_post(&seen);
    assert_eq!(body["routing_key"], PD_ROUTING_KEY);
    assert_eq!(body["event_action"], "trigger");
    let dedup_key = body["dedup_key"].as_str().expect("dedup_key").to_owned();
    assert!(
        !dedup_key.is_empty() && dedup_key.len() <= 255,
        "{dedup_key}"
    );
    assert!(!dedup_key.contains(TOKEN), "{dedup_key}");
    assert!(
        dedup_key.contains(&derived_ref(&key(), TOKEN)),
        "{dedup_key}"
    );
    let payload = &body["payload"];
    let summary = payload["summary"].as_str().expect("summary");
    assert!(
        !summary.is_empty() && summary.chars().count() <= 1024,
        "{summary}"
    );
    assert!(payload["source"].as_str().is_some_and(|s| !s.is_empty()));
    let severity = payload["severity"].as_str().expect("severity");
    assert!(
        ["critical", "error", "warning", "info"].contains(&severity),
        "{severity}"
    );
    let timestamp = payload["timestamp"].as_str().expect("timestamp");
    assert!(
        DateTime::parse_from_rfc3339(timestamp).is_ok(),
        "{timestamp}"
    );

    // The recovery resolves the same incident.
    let resolve = delivery(event(EventKind::Reporting, 4), "chpd1", &pd);
    assert_eq!(
        n.send(&resolve).await,
        Ok("pagerduty answered HTTP 202".to_owned())
    );
    let body = assert_json_post(&standin.last());
    assert_eq!(body["routing_key"], PD_ROUTING_KEY);
    assert_eq!(body["event_action"], "resolve");
    assert_eq!(body["dedup_key"], dedup_key.as_str());

    // The older trigger, retried late, must not reopen the incident.
    let before = standin.count();
    let late = n.send(&trigger).await.expect("not an error");
    assert!(late.contains("not sent"), "{late}");
    assert_eq!(standin.count(), before, "a late trigger was sent");

    // PagerDuty's 400: the event is refused, with its reasons.
    let bad = delivery(event(EventKind::Missing, 5), "chpd2", &pd);
    standin.then(json_reply(
        400,
        json!({"status": "invalid event", "message": "Event object is invalid",
               "errors": ["Length of 'routing_key' is incorrect (should be 32 characters)"]}),
    ));
    let err = assert_permanent(n.send(&bad).await, "Event object is invalid");
    assert!(
        err.detail.contains("Length of 'routing_key' is incorrect"),
        "{err:?}"
    );
    assert_token_absent(&standin);
}

#[tokio::test]
async fn pagerduty_rate_limit_and_outage_are_transient() {
    let standin = StandIn::vendor(ChannelKind::Pagerduty).await;
    let n = notifier();
    let pd = settings_for(ChannelKind::Pagerduty, &standin);
    standin.then(json_reply(500, json!({"status": "error"})));
    let err = n
        .send(&delivery(event(EventKind::Missing, 3), "chpd1", &pd))
        .await
        .expect_err("500");
    assert!(!err.permanent && err.retry_after.is_none(), "{err:?}");
    standin.then(Answer::Reply {
        status: 429,
        headers: vec![("retry-after", "5".to_owned())],
        body: String::new(),
    });
    assert_retry_after(
        n.send(&delivery(event(EventKind::Missing, 3), "chpd2", &pd))
            .await,
        chrono::Duration::seconds(5),
    );
}

#[tokio::test]
async fn pagerduty_test_triggers_then_resolves() {
    let standin = StandIn::vendor(ChannelKind::Pagerduty).await;
    let config = channel_config("chpd1", settings_for(ChannelKind::Pagerduty, &standin));
    let answered = notifier().test(&config, "Ops pager").await.expect("sent");
    assert_eq!(answered, "pagerduty answered HTTP 202");
    let seen = standin.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let trigger = assert_json_post(&seen[0]);
    let resolve = assert_json_post(&seen[1]);
    assert_eq!(seen[0].uri, "/v2/enqueue");
    assert_eq!(seen[1].uri, "/v2/enqueue");
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(trigger["routing_key"], PD_ROUTING_KEY);
    assert!(trigger["payload"]["summary"]
        .as_str()
        .is_some_and(|s| s.contains("Ops pager")));
    assert_eq!(resolve["event_action"], "resolve");
    assert!(trigger["dedup_key"].as_str().is_some_and(|k| !k.is_empty()));
    assert_eq!(resolve["dedup_key"], trigger["dedup_key"]);
}

#[tokio::test]
async fn opsgenie_test_creates_then_closes() {
    let standin = StandIn::vendor(ChannelKind::Opsgenie).await;
    let config = channel_config("chog1", settings_for(ChannelKind::Opsgenie, &standin));
    notifier().test(&config, "Ops genie").await.expect("sent");
    let seen = standin.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].uri, "/v2/alerts");
    let alias = seen[0].json()["alias"].as_str().expect("alias").to_owned();
    assert_eq!(
        seen[1].uri,
        format!("/v2/alerts/{alias}/close?identifierType=alias")
    );
}

// ---------------------------------------------------------------------------------------
// Opsgenie
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn opsgenie_creates_and_closes_by_alias() {
    let standin = StandIn::vendor(ChannelKind::Opsgenie).await;
    let n = notifier();
    let og = settings_for(ChannelKind::Opsgenie, &standin);
    let mut missing = event(EventKind::Missing, 3);
    missing.name = SnitchName::parse(&"Nightly backup of the warehouse ".repeat(8)).expect("name");

    assert_eq!(
        n.send(&delivery(missing, "chog1", &og)).await,
        Ok("opsgenie answered HTTP 202".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, "/v2/alerts");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("GenieKey {OG_API_KEY}").as_str())
    );
    let body = assert_json_post(&seen);
    let message = body["message"].as_str().expect("message");
    assert!(
        !message.is_empty() && message.chars().count() <= 130,
        "{message}"
    );
    let alias = body["alias"].as_str().expect("alias").to_owned();
    assert!(!alias.is_empty() && alias.chars().count() <= 512, "{alias}");
    assert!(!alias.contains(TOKEN));
    assert_eq!(body["priority"], "P1");

    let recovery = delivery(event(EventKind::Reporting, 4), "chog1", &og);
    n.send(&recovery).await.expect("closed");
    let seen = standin.last();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(
        seen.uri,
        format!("/v2/alerts/{alias}/close?identifierType=alias")
    );
    assert_eq!(
        seen.header("authorization"),
        Some(format!("GenieKey {OG_API_KEY}").as_str())
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));

    standin.then(json_reply(
        422,
        json!({"message": "Request body is not processable. Please check the errors.",
               "errors": {"message": "Message can not be empty."},
               "took": 0.001, "requestId": "d0b2b6bc-3c2f-4f1c-8b5a-2f0e0b0c1a2b"}),
    ));
    assert_permanent(
        n.send(&delivery(event(EventKind::Missing, 5), "chog2", &og))
            .await,
        "Request body is not processable",
    );
    assert_token_absent(&standin);
}

// ---------------------------------------------------------------------------------------
// Telegram
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn telegram_sends_html_with_only_its_own_tags() {
    let standin = StandIn::vendor(ChannelKind::Telegram).await;
    let n = notifier();
    let tg = settings_for(ChannelKind::Telegram, &standin);
    let mut e = event(EventKind::Missing, 3);
    e.name = SnitchName::parse("Backup <script>alert(1)</script> & co").expect("name");

    assert_eq!(
        n.send(&delivery(e, "chtg1", &tg)).await,
        Ok("telegram answered HTTP 200".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, format!("/bot{TG_BOT_TOKEN}/sendMessage"));
    let body = assert_json_post(&seen);
    assert_eq!(body["chat_id"], TG_CHAT_ID);
    assert_eq!(body["parse_mode"], "HTML");
    let text = body["text"].as_str().expect("text");
    assert!(!text.is_empty() && text.chars().count() <= 4096);
    assert_html_only(text, &["<b>", "</b>", "</a>"]);
    assert!(text.contains("&lt;script&gt;"), "{text}");
    assert!(!text.contains("<script>"), "{text}");
    assert!(text.contains("&amp; co"), "{text}");
    assert!(
        text.contains(&alert_link(DASHBOARD, "chtg1", &derived_ref(&key(), TOKEN))),
        "{text}"
    );

    standin.then(json_reply(
        429,
        json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 3",
               "parameters": {"retry_after": 3}}),
    ));
    assert_retry_after(
        n.send(&delivery(event(EventKind::Missing, 4), "chtg1", &tg))
            .await,
        chrono::Duration::seconds(3),
    );

    standin.then(json_reply(
        403,
        json!({"ok": false, "error_code": 403,
               "description": "Forbidden: bot was blocked by the user"}),
    ));
    assert_permanent(
        n.send(&delivery(event(EventKind::Missing, 4), "chtg2", &tg))
            .await,
        "Forbidden: bot was blocked by the user",
    );

    // A 200 that says `ok: false` is no success.
    standin.then(json_reply(
        200,
        json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}),
    ));
    let err = n
        .send(&delivery(event(EventKind::Missing, 5), "chtg3", &tg))
        .await
        .expect_err("refused in the body");
    assert!(err.detail.contains("chat not found"), "{err:?}");
    assert_token_absent(&standin);
}

/// Telegram refuses a text whose HTML is broken: cutting to 4096 characters must not
/// cut through a tag or an entity.
#[tokio::test]
async fn telegram_long_text_keeps_valid_html() {
    let standin = StandIn::vendor(ChannelKind::Telegram).await;
    let tg = settings_for(ChannelKind::Telegram, &standin);
    let mut e = event(EventKind::Missing, 3);
    e.notes = Notes::parse(&"<".repeat(1000)).expect("notes");
    e.check_in = Some(CheckIn::new(
        at(),
        Outcome::Success,
        CheckInMessage::truncating(&"&".repeat(256)),
    ));
    notifier()
        .send(&delivery(e, "chtg1", &tg))
        .await
        .expect("sent");
    let body = standin.last().json();
    let text = body["text"].as_str().expect("text");
    assert!(text.chars().count() <= 4096);
    assert_html_only(text, &["<b>", "</b>", "</a>"]);
    let opened = text.matches("<a href=").count();
    assert_eq!(opened, text.matches("</a>").count(), "{text}");
}

// ---------------------------------------------------------------------------------------
// ntfy, Pushover
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn ntfy_publishes_json_with_a_bearer_token_only_when_set() {
    let standin = StandIn::vendor(ChannelKind::Ntfy).await;
    let n = notifier();
    let open = settings_for(ChannelKind::Ntfy, &standin);
    assert_eq!(
        n.send(&delivery(event(EventKind::Missing, 3), "chntfy1", &open))
            .await,
        Ok("ntfy answered HTTP 200".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.uri, "/");
    assert_eq!(seen.header("authorization"), None);
    let body = assert_json_post(&seen);
    assert_eq!(body["topic"], "snitch-alerts");
    assert!(body["title"]
        .as_str()
        .is_some_and(|t| t.contains("Nightly backup")));
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    let priority = body["priority"].as_u64().expect("an integer priority");
    assert!((1..=5).contains(&priority), "{priority}");

    let protected = settings(
        ChannelKind::Ntfy,
        &[
            ("topic", "snitch-alerts".to_owned()),
            ("server", standin.base.clone()),
            ("token", "tk_x".to_owned()),
        ],
    );
    n.send(&delivery(
        event(EventKind::Reporting, 4),
        "chntfy2",
        &protected,
    ))
    .await
    .expect("sent");
    let seen = standin.last();
    assert_eq!(seen.uri, "/");
    assert_eq!(seen.header("authorization"), Some("Bearer tk_x"));
    let body = assert_json_post(&seen);
    assert!(body["priority"]
        .as_u64()
        .is_some_and(|p| (1..=5).contains(&p)));

    standin.then(json_reply(
        403,
        json!({"code": 40301, "http": 403, "error": "forbidden",
               "link": "https://ntfy.sh/docs/publish/#authentication"}),
    ));
    assert_permanent(
        n.send(&delivery(
            event(EventKind::Missing, 5),
            "chntfy2",
            &protected,
        ))
        .await,
        "forbidden",
    );
    assert_token_absent(&standin);
}

#[tokio::test]
async fn pushover_posts_a_form() {
    let standin = StandIn::vendor(ChannelKind::Pushover).await;
    let n = notifier();
    let po = settings_for(ChannelKind::Pushover, &standin);
    assert_eq!(
        n.send(&delivery(event(EventKind::Missing, 3), "chpo1", &po))
            .await,
        Ok("pushover answered HTTP 200".to_owned())
    );
    let seen = standin.last();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.uri, "/1/messages.json");
    assert_eq!(
        seen.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let form: Vec<(String, String)> = form_urlencoded::parse(&seen.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {name} in {form:?}"))
    };
    assert_eq!(field("token"), PO_APP_TOKEN);
    assert_eq!(field("user"), PO_USER_KEY);
    let message = field("message");
    assert!(
        !message.is_empty() && message.chars().count() <= 1024,
        "{message}"
    );
    let title = field("title");
    assert!(title.contains("Nightly backup") && title.chars().count() <= 250);
    let priority: i8 = field("priority").parse().expect("a number");
    assert!((-2..=2).contains(&priority), "{priority}");

    standin.then(json_reply(
        400,
        json!({"user": "invalid", "errors": ["user identifier is invalid"], "status": 0,
               "request": "5042853c-402d-4a18-abcb-168734a801de"}),
    ));
    assert_permanent(
        n.send(&delivery(event(EventKind::Missing, 4), "chpo1", &po))
            .await,
        "user identifier is invalid",
    );
    assert_token_absent(&standin);
}

// ---------------------------------------------------------------------------------------
// Matrix
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn matrix_puts_with_a_stable_transaction_id() {
    let standin = StandIn::vendor(ChannelKind::Matrix).await;
    let n = notifier();
    let mx = settings_for(ChannelKind::Matrix, &standin);
    let d = delivery(event(EventKind::Missing, 3), "chmx1", &mx);

    standin.then(json_reply(
        500,
        json!({"errcode": "M_UNKNOWN", "error": "Internal server error"}),
    ));
    standin.then(json_reply(200, json!({"event_id": "$x"})));
    let err = n.send(&d).await.expect_err("500");
    assert!(!err.permanent && err.retry_after.is_none(), "{err:?}");
    assert_eq!(n.send(&d).await, Ok("matrix answered HTTP 200".to_owned()));

    let seen = standin.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].uri, seen[1].uri,
        "a retry changed the transaction id"
    );
    let prefix = "/_matrix/client/v3/rooms/%21AbCdEf%3Amatrix.example/send/m.room.message/";
    let txn = seen[0]
        .uri
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{} is not under {prefix}", seen[0].uri));
    assert!(
        !txn.is_empty() && !txn.contains('/') && !txn.contains('?'),
        "{txn}"
    );
    assert!(!txn.contains(TOKEN), "{txn}");
    for s in &seen {
        assert_eq!(s.method, Method::PUT);
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {MX_ACCESS_TOKEN}").as_str())
        );
        assert_eq!(s.header("content-type"), Some("application/json"));
        let body = s.json();
        assert_eq!(body["msgtype"], "m.text");
        assert!(body["body"]
            .as_str()
            .is_some_and(|b| b.contains("Nightly backup")));
        assert_eq!(body["format"], "org.matrix.custom.html");
        let html = body["formatted_body"].as_str().expect("formatted_body");
        assert_html_only(html, &["<b>", "</b>", "<br>", "</a>"]);
    }

    // Another delivery of the same event: another transaction.
    let again = delivery_numbered(event(EventKind::Missing, 3), 2, "chmx1", &mx);
    n.send(&again).await.expect("sent");
    let third = standin.last();
    assert!(third.uri.starts_with(prefix));
    assert_ne!(
        third.uri, seen[0].uri,
        "two deliveries shared a transaction id"
    );

    standin.then(json_reply(
        403,
        json!({"errcode": "M_FORBIDDEN", "error": "You are not in this room."}),
    ));
    assert_permanent(
        n.send(&delivery(event(EventKind::Missing, 4), "chmx1", &mx))
            .await,
        "You are not in this room.",
    );
    assert_token_absent(&standin);
}

// ---------------------------------------------------------------------------------------
// Across kinds
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn hostile_text_arrives_inert() {
    let n = notifier();
    let hostile_kinds = [
        ChannelKind::Slack,
        ChannelKind::Discord,
        ChannelKind::Telegram,
        ChannelKind::Matrix,
        ChannelKind::Mattermost,
    ];
    for kind in hostile_kinds {
        let standin = StandIn::vendor(kind).await;
        let s = settings_for(kind, &standin);
        n.send(&delivery(hostile_event(3), "chhostile", &s))
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e:?}"));
        let body = standin.last().json();
        let texts = strings(&body);
        assert_no_mention(&texts);
        assert!(
            texts
                .iter()
                .any(|t| t.contains(&format!("@{JOINER}everyone"))),
            "{kind}: the defused mention is missing from {body}"
        );
        match kind {
            ChannelKind::Slack => {
                // The mrkdwn preview has no markup left; the blocks are plain text.
                // Slack parses `<!channel>` in mrkdwn only: the top-level `text`.
                let text = body["text"].as_str().expect("text");
                assert!(!text.contains("<!channel>"), "{text}");
                assert!(!text.contains('<') && !text.contains('>'), "{text}");
                assert!(text.contains("&lt;!channel&gt;"), "{text}");
                let blocks = body["blocks"].as_array().expect("blocks");
                for block in blocks {
                    let objects = std::iter::once(&block["text"])
                        .chain(block["fields"].as_array().into_iter().flatten())
                        .chain(block["elements"].as_array().into_iter().flatten());
                    for object in objects {
                        if object.is_object() && object["type"] != "button" {
                            assert_eq!(object["type"], "plain_text", "{block}");
                        }
                    }
                }
            }
            ChannelKind::Discord => {
                let embed = &body["embeds"][0];
                let description = embed["description"].as_str().expect("description");
                assert!(!description.contains("[click]("), "{description}");
                assert!(description.contains("\\[click\\]"), "{description}");
                assert!(description.contains("\\*bold\\*"), "{description}");
                for field in embed["fields"].as_array().expect("fields") {
                    let value = field["value"].as_str().expect("value");
                    assert!(!value.contains("[click]("), "{value}");
                }
                assert_eq!(body["allowed_mentions"], json!({"parse": []}));
            }
            ChannelKind::Mattermost => {
                let text = body["text"].as_str().expect("text");
                assert!(!text.contains("[click]("), "{text}");
                assert!(text.contains("\\[click\\]"), "{text}");
                assert!(text.contains("\\*bold\\*"), "{text}");
                assert!(!text.contains("<b>"), "{text}");
            }
            ChannelKind::Telegram => {
                let text = body["text"].as_str().expect("text");
                assert_html_only(text, &["<b>", "</b>", "</a>"]);
                assert!(!text.contains("<b>x</b>"), "{text}");
                assert!(text.contains("&lt;b&gt;x&lt;/b&gt;"), "{text}");
            }
            ChannelKind::Matrix => {
                let html = body["formatted_body"].as_str().expect("formatted_body");
                assert_html_only(html, &["<b>", "</b>", "<br>", "</a>"]);
                assert!(!html.contains("<b>x</b>"), "{html}");
                assert!(html.contains("&lt;b&gt;x&lt;/b&gt;"), "{html}");
                assert_eq!(body["m.mentions"], json!({}));
            }
            _ => unreachable!(),
        }
        assert_token_absent(&standin);
    }
}

/// What a hostile job writes to look like a line of ours.
const FORGED: &str = "This alert is a test";

/// Everything that can break a line, or reorder one, in text a job or a user wrote.
const BREAKERS: [&str; 12] = [
    "\n\n", "\r", "\r\n", "\0", "\u{2028}", "\u{2029}", "\u{85}", "\u{b}", "\u{c}", "\u{202e}",
    "\u{2066}", "\u{200f}",
];

/// The lines of a request's text as people read them: split at every line break (and at
/// Matrix's `<br>`).
fn lines_of(text: &str) -> Vec<&str> {
    text.split("<br>")
        .flat_map(|part| {
            part.split([
                '\n', '\r', '\u{2028}', '\u{2029}', '\u{85}', '\u{b}', '\u{c}',
            ])
        })
        .collect()
}

/// docs/rules.md#channels, docs/rules.md#hostile-input: every field a job wrote (exit
/// status, message) and the name is one line, and notes are quoted line by line, in every
/// kind: nothing a job or a user wrote starts a line of a message, and no character of
/// theirs breaks or reorders one, even in an event stored before intake kept the exit
/// status on one line.
#[tokio::test]
async fn what_a_job_wrote_is_one_line_or_quoted_line_by_line() {
    let n = notifier();
    // Events numbered in order: a paging kind sends none older than one it sent.
    let mut number = 3;
    for kind in VENDOR_KINDS {
        let standin = StandIn::vendor(kind).await;
        let s = settings_for(kind, &standin);
        for br in BREAKERS {
            number += 2;
            let mut errored = event(EventKind::Errored, number);
            // No store holds a NUL in a name or notes: a tab stands in for it there.
            let stored_br = if br == "\0" { "\t" } else { br };
            errored.name = SnitchName::parse_stored(&format!("job{stored_br}{FORGED}"))
                .expect("a stored name");
            errored.check_in = Some(CheckIn::new(
                at(),
                Outcome::Error {
                    exit_status: format!("7{br}{FORGED}. No action needed."),
                },
                CheckInMessage::truncating(&format!("ok{br}{FORGED}")),
            ));
            // Notes may hold lines: they are quoted.
            errored.notes = Notes::parse(&format!("Call Bob{stored_br}{FORGED}"))
                .expect("notes may hold lines");
            let mut missing = event(EventKind::Missing, number + 1);
            missing.name = errored.name.clone();
            missing.notes = errored.notes.clone();
            missing.check_in = Some(CheckIn::new(
                at(),
                Outcome::Success,
                CheckInMessage::truncating(&format!("ok{br}{FORGED}")),
            ));
            for e in [errored, missing] {
                let before = standin.count();
                n.send(&delivery(e, "chlines", &s))
                    .await
                    .unwrap_or_else(|err| panic!("{kind}: {err:?}"));
                assert!(standin.count() > before, "{kind}: nothing sent");
                let seen = standin.last();
                let texts: Vec<String> = match seen.header("content-type") {
                    Some("application/json") => strings(&seen.json()),
                    _ => form_urlencoded::parse(&seen.body)
                        .map(|(_, v)| v.into_owned())
                        .collect(),
                };
                for text in &texts {
                    for line in lines_of(text) {
                        assert!(
                            !line.trim_start().starts_with(FORGED),
                            "{kind} {br:?}: a line {line:?} of {text:?}"
                        );
                        assert!(
                            !line.chars().any(snitch_core::types::is_layout_control),
                            "{kind} {br:?}: {line:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A name of every Markdown mark (and Google Chat's and Slack's).
const MARKDOWN_NAME: &str = "*b* _i_ ~s~ `c` ||sp|| > q [l](u) #h <t:1> \\x";

/// Whether each `*`, `_`, `~` and `` ` `` of `text` has a word joiner on both sides:
/// Slack's mrkdwn and Google Chat's markup have no escape, and a mark against a word
/// joiner opens or closes nothing.
fn chat_marks_defused(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    chars.iter().enumerate().all(|(i, c)| {
        !"*_~`".contains(*c)
            || (i > 0 && chars[i - 1] == JOINER && chars.get(i + 1) == Some(&JOINER))
    })
}

/// Every Markdown mark of `text` has its backslash (Discord, Mattermost, Teams).
fn markdown_marks_escaped(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if "`*_~|>[]()#<".contains(chars[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// docs/rules.md#channels: every field built from user text is escaped for its vendor's
/// format, titles, headers and summaries included, in every kind.
#[tokio::test]
async fn every_field_of_user_text_is_escaped_for_its_vendor_titles_included() {
    let n = notifier();
    let mut number = 3;
    for kind in VENDOR_KINDS {
        let standin = StandIn::vendor(kind).await;
        let s = settings_for(kind, &standin);
        number += 1;
        let mut e = event(EventKind::Errored, number);
        e.name = SnitchName::parse(MARKDOWN_NAME).expect("a valid name");
        e.check_in = Some(CheckIn::new(
            at(),
            Outcome::from_exit_status(Some("*7*")),
            CheckInMessage::truncating(MARKDOWN_NAME),
        ));
        n.send(&delivery(e, "chmarks", &s))
            .await
            .unwrap_or_else(|err| panic!("{kind}: {err:?}"));
        let seen = standin.last();
        match kind {
            ChannelKind::Discord => {
                let embed = &seen.json()["embeds"][0];
                let title = embed["title"].as_str().expect("title");
                let name = title.strip_prefix("ERRORED: ").expect("our word, as it is");
                assert!(markdown_marks_escaped(name), "title {title:?}");
                assert!(title.chars().count() <= 256, "{title:?}");
                let description = embed["description"].as_str().expect("description");
                assert!(markdown_marks_escaped(description), "{description:?}");
            }
            ChannelKind::Mattermost => {
                let text = seen.json()["text"].as_str().expect("text").to_owned();
                let (title, rest) = text.split_once('\n').expect("a title line");
                let title = title.strip_prefix("**").and_then(|t| t.strip_suffix("**"));
                assert!(title.is_some_and(markdown_marks_escaped), "title {title:?}");
                let rest = rest.split("\n[Open in Snitch](").next().expect("lines");
                assert!(markdown_marks_escaped(rest), "{rest:?}");
            }
            ChannelKind::Teams => {
                let body = seen.json();
                let card = &body["attachments"][0]["content"];
                for block in card["body"].as_array().expect("body") {
                    if let Some(text) = block["text"].as_str() {
                        assert!(markdown_marks_escaped(text), "{text:?}");
                    }
                }
            }
            ChannelKind::GoogleChat => {
                let text = seen.json()["text"].as_str().expect("text").to_owned();
                let (title, rest) = text.split_once('\n').expect("a title line");
                let title = title.strip_prefix('*').and_then(|t| t.strip_suffix('*'));
                assert!(title.is_some_and(chat_marks_defused), "title {title:?}");
                let rest = rest.split("\n<https://").next().expect("lines");
                assert!(chat_marks_defused(rest), "{rest:?}");
                assert!(!rest.contains('<') && !rest.contains('>'), "{rest:?}");
            }
            ChannelKind::Slack => {
                let body = seen.json();
                // The mrkdwn preview; the blocks are plain text.
                let text = body["text"].as_str().expect("text");
                assert!(chat_marks_defused(text), "{text:?}");
                assert_eq!(body["blocks"][0]["text"]["type"], "plain_text");
            }
            ChannelKind::Telegram => {
                let text = seen.json()["text"].as_str().expect("text").to_owned();
                assert_html_only(&text, &["<b>", "</b>", "</a>"]);
                assert_eq!(seen.json()["parse_mode"], "HTML");
            }
            ChannelKind::Matrix => {
                let html = seen.json()["formatted_body"]
                    .as_str()
                    .expect("html")
                    .to_owned();
                assert_html_only(&html, &["<b>", "</b>", "<br>", "</a>"]);
            }
            ChannelKind::Ntfy => assert_eq!(seen.json()["markdown"], false),
            ChannelKind::Pushover => {
                // Plain text unless `html=1` is sent.
                let form: Vec<(String, String)> =
                    form_urlencoded::parse(&seen.body).into_owned().collect();
                assert!(
                    !form.iter().any(|(k, _)| k == "html" || k == "monospace"),
                    "{form:?}"
                );
            }
            // Plain-text fields only.
            ChannelKind::Pagerduty | ChannelKind::Opsgenie => {}
            other => panic!("{other}"),
        }
    }
}

/// Addresses a job or a user could write, each of which some vendor makes a link.
const WRITTEN_URLS: [&str; 6] = [
    "https://evil.example/x",
    "HTTP://x",
    "www.x.com",
    "evil.example/login",
    "hxxp://ok mailto:eve@evil.example",
    "ftp://10.0.0.1/a",
];

/// docs/rules.md#channels: links in a message are ours. In every kind, a URL or domain a
/// job or a user wrote (name, message, notes, tags) arrives defused: a word joiner after
/// the scheme's `:` and after every dot before a letter or digit, so no vendor makes it
/// a link; the dashboard's link is the only one. PagerDuty's `component` and Opsgenie's
/// `tags`, matched by the vendors' rules, are sent as written.
#[tokio::test]
async fn links_in_a_message_are_ours_in_every_kind() {
    let n = notifier();
    let mut number = 3;
    for kind in VENDOR_KINDS {
        let standin = StandIn::vendor(kind).await;
        let s = settings_for(kind, &standin);
        for written in WRITTEN_URLS {
            for event_kind in [EventKind::Errored, EventKind::Missing] {
                number += 1;
                let mut e = event(event_kind, number);
                e.name = SnitchName::parse(&format!("see {written}")).expect("a valid name");
                e.notes = Notes::parse(&format!("runbook {written}")).expect("notes");
                e.tags = Tags::parse(&[written.split(' ').next().expect("a word")]).expect("a tag");
                e.check_in = Some(CheckIn::new(
                    at(),
                    Outcome::from_exit_status(Some("1")),
                    CheckInMessage::truncating(&format!("go to {written}")),
                ));
                let before = standin.count();
                n.send(&delivery(e, "chlinks", &s))
                    .await
                    .unwrap_or_else(|err| panic!("{kind}: {err:?}"));
                assert!(standin.count() > before, "{kind}: nothing sent");
                let seen = standin.last();
                let texts: Vec<String> = match seen.header("content-type") {
                    Some("application/json") => {
                        let mut body = seen.json();
                        if let Some(payload) = body.get_mut("payload") {
                            payload["component"] = Value::Null;
                        }
                        body["tags"] = Value::Null;
                        strings(&body)
                    }
                    _ => form_urlencoded::parse(&seen.body)
                        .map(|(_, v)| v.into_owned())
                        .collect(),
                };
                let mut defused = false;
                for text in &texts {
                    // Ours: the dashboard's links, and Teams' card schema.
                    let ours_removed = text
                        .replace(DASHBOARD, "")
                        .replace("http://adaptivecards.io/schemas/adaptive-card.json", "");
                    let lower = ours_removed.to_lowercase();
                    for bad in ["://", "evil.example", "www.x", "x.com", "10.0.0.1"] {
                        assert!(
                            !lower.contains(bad),
                            "{kind}: {bad:?} of {written:?} in {text:?}"
                        );
                    }
                    defused |= text.contains(&format!(":{JOINER}//"))
                        || text.contains(&format!(".{JOINER}"));
                }
                assert!(defused, "{kind}: {written:?} is gone from {texts:?}");
            }
        }
    }
}

#[tokio::test]
async fn the_token_is_in_no_request_of_any_kind() {
    let n = notifier();
    for kind in VENDOR_KINDS {
        let standin = StandIn::vendor(kind).await;
        let s = settings_for(kind, &standin);
        let channel = format!("chall{}", kind.as_str().replace('_', ""));
        let events = [
            event(EventKind::Missing, 3),
            event(EventKind::Errored, 4),
            event(EventKind::Reporting, 5),
            event(EventKind::Paused, 6),
            hostile_event(7),
        ];
        for e in events {
            n.send(&delivery(e, &channel, &s))
                .await
                .unwrap_or_else(|err| panic!("{kind}: {err:?}"));
        }
        n.test(&channel_config(&channel, s.clone()), "Test channel")
            .await
            .unwrap_or_else(|err| panic!("{kind} test: {err:?}"));
        assert!(standin.count() >= 6, "{kind}: {} requests", standin.count());
        assert_token_absent(&standin);
    }
}

#[tokio::test]
async fn a_hung_vendor_does_not_delay_another_channel() {
    let hung = StandIn::start(Answer::Hang).await;
    let healthy = StandIn::vendor(ChannelKind::Slack).await;
    let n = notifier_with_timeout(Duration::from_secs(1));
    let stuck = delivery(
        event(EventKind::Missing, 3),
        "chhung",
        &settings_for(ChannelKind::Slack, &hung),
    );
    let fine = delivery(
        event(EventKind::Missing, 3),
        "chfine",
        &settings_for(ChannelKind::Slack, &healthy),
    );

    let started = monotonic_now();
    let timed = |d: Delivery| {
        let n = &n;
        async move {
            let result = n.send(&d).await;
            (result, started.elapsed())
        }
    };
    let ((stuck_result, stuck_took), (fine_result, fine_took)) =
        tokio::join!(timed(stuck), timed(fine));

    assert_eq!(fine_result, Ok("slack answered HTTP 200".to_owned()));
    let err = stuck_result.expect_err("timed out");
    assert!(!err.permanent, "{err:?}");
    assert_eq!(hung.count(), 1, "the hung stand-in got the request");
    assert!(
        fine_took < stuck_took,
        "the healthy send ({fine_took:?}) waited for the hung one ({stuck_took:?})"
    );
    assert!(fine_took < Duration::from_secs(5), "{fine_took:?}");
    assert!(stuck_took >= Duration::from_millis(900), "{stuck_took:?}");
}
