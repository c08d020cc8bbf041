//! [`WebhookNotifier`]: POSTs deliveries with reqwest (feature `webhooks`).

use std::error::Error as StdError;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::CONTENT_TYPE;
use reqwest::{redirect, Client, StatusCode, Url};
use snitch_core::{Channel, Clock, Delivery, Notifier, NotifyError, SystemClock};

use super::address::{is_refused_address, GuardedResolver, Refused};
use super::payload::{webhook_body, EVENT_ID_HEADER};
use super::signature::{signature_header, SIGNATURE_HEADER};
use crate::loggable_id;

/// The hard timeout of a delivery attempt (docs/rules.md#webhooks).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take (docs/rules.md#delivery-isolation).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `Snitch/<version> (+https://github.com/snitch-rs/snitch)`.
pub fn default_user_agent() -> String {
    format!(
        "Snitch/{} (+https://github.com/snitch-rs/snitch)",
        env!("CARGO_PKG_VERSION")
    )
}

/// Settings of a [`WebhookNotifier`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookOptions {
    /// Deliver to loopback, private, link-local, CGNAT, multicast and unspecified
    /// addresses too (default: refused).
    pub allow_private: bool,
    /// The hard timeout of one attempt, connecting included (default 30 s).
    pub timeout: Duration,
    /// How long establishing the connection may take (default 5 s).
    pub connect_timeout: Duration,
    /// The `User-Agent` of every request (default [`default_user_agent`]).
    pub user_agent: String,
}

impl WebhookOptions {
    /// Delivering to private addresses too, or not.
    pub fn with_allow_private(mut self, allow: bool) -> Self {
        self.allow_private = allow;
        self
    }

    /// With a hard timeout of `timeout` per attempt.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With at most `timeout` to establish a connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// With `user_agent` as the `User-Agent`.
    pub fn with_user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            allow_private: false,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            user_agent: default_user_agent(),
        }
    }
}

/// Delivers [`Channel::Webhook`] deliveries. Build it once: it holds a connection pool.
#[derive(Clone)]
pub struct WebhookNotifier {
    client: Client,
    options: WebhookOptions,
    /// Where the `t` of signatures comes from.
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for WebhookNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookNotifier")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl WebhookNotifier {
    /// Builds the HTTP client: no redirects, no proxy, the hard and connect timeouts,
    /// rustls, and a resolver that drops refused addresses unless `allow_private`.
    pub fn new(options: WebhookOptions) -> Result<Self, reqwest::Error> {
        let client = guarded_client(&options)?;
        Ok(WebhookNotifier {
            client,
            options,
            clock: Arc::new(SystemClock),
        })
    }

    /// Takes the signing time from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The settings it was built with.
    pub fn options(&self) -> &WebhookOptions {
        &self.options
    }

    /// A short, clear failure for a request that got no answer; never shows the URL.
    /// A target refused as private, or a request that cannot even be built, is
    /// permanent: trying again cannot help.
    fn describe(&self, err: &reqwest::Error) -> NotifyError {
        describe_error(err, &self.options)
    }
}

/// The HTTP client of outbound notifications: rustls, no redirects followed, no proxy,
/// the options' timeouts, and a resolver that refuses private addresses unless allowed.
pub(crate) fn guarded_client(options: &WebhookOptions) -> Result<Client, reqwest::Error> {
    Client::builder()
        .use_rustls_tls()
        .redirect(redirect::Policy::none())
        .timeout(options.timeout)
        .connect_timeout(options.connect_timeout)
        .user_agent(options.user_agent.clone())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            allow_private: options.allow_private,
        }))
        .build()
}

/// What a failed request means for the delivery: a refused private address or a URL
/// that cannot be sent to is permanent; timeouts and connection errors are transient.
pub(crate) fn describe_error(err: &reqwest::Error, options: &WebhookOptions) -> NotifyError {
    if let Some(refused) = find_source::<Refused>(err) {
        return NotifyError::permanent(refused.to_string());
    }
    let cause = innermost_cause(err);
    if err.is_builder() {
        return NotifyError::permanent(format!("cannot send to this URL: {cause}"));
    }
    if err.is_connect() && err.is_timeout() {
        return NotifyError::new(format!(
            "connection timed out after {}",
            describe_duration(options.connect_timeout)
        ));
    }
    if err.is_timeout() {
        return NotifyError::new(format!(
            "timed out after {}",
            describe_duration(options.timeout)
        ));
    }
    if err.is_connect() {
        NotifyError::new(format!("connection failed: {cause}"))
    } else {
        NotifyError::new(format!("request failed: {cause}"))
    }
}

#[async_trait]
impl Notifier for WebhookNotifier {
    async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError> {
        let Channel::Webhook { url, secret, .. } = &delivery.channel else {
            return Err(NotifyError::permanent("not a webhook delivery"));
        };
        let target = Target::parse(url.as_str())?;
        if !self.options.allow_private {
            target.check_literal_host()?;
        }
        let event = &delivery.event;
        let body = serde_json::to_vec(&webhook_body(event))
            .map_err(|e| NotifyError::permanent(format!("cannot encode the body: {e}")))?;

        let mut request = self
            .client
            .post(target.url)
            .header(CONTENT_TYPE, "application/json")
            .header(EVENT_ID_HEADER, event.id.as_str());
        if let Some((user, password)) = target.credentials {
            request = request.basic_auth(user, password);
        }
        if let Some(secret) = secret {
            let now = self.clock.now().timestamp();
            request = request.header(
                SIGNATURE_HEADER,
                signature_header(secret.expose(), now, &body),
            );
        }

        let response = match request.body(body).send().await {
            Ok(response) => response,
            Err(err) => {
                let failure = self.describe(&err);
                tracing::debug!(
                    delivery = %loggable_id(&delivery.id),
                    detail = %failure.detail,
                    permanent = failure.permanent,
                    "webhook attempt failed"
                );
                return Err(failure);
            }
        };
        let status = response.status();
        if status.is_success() {
            tracing::debug!(
                delivery = %loggable_id(&delivery.id),
                status = status.as_u16(),
                "webhook delivered"
            );
            Ok(format!("HTTP {}", status.as_u16()))
        } else {
            let detail = describe_status(status);
            tracing::debug!(delivery = %loggable_id(&delivery.id), %detail, "webhook attempt failed");
            Err(NotifyError::new(detail))
        }
    }
}

/// A hook URL split into where to send and the Basic credentials it carried.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) url: Url,
    pub(crate) credentials: Option<(String, Option<String>)>,
}

impl Target {
    pub(crate) fn parse(raw: &str) -> Result<Target, NotifyError> {
        let invalid = || NotifyError::permanent("invalid webhook URL");
        let mut url = Url::parse(raw).map_err(|_| invalid())?;
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let user = decode(url.username());
        let password = url.password().map(decode);
        let credentials = (!user.is_empty() || password.is_some()).then_some((user, password));
        if credentials.is_some() {
            url.set_username("").map_err(|()| invalid())?;
            url.set_password(None).map_err(|()| invalid())?;
        }
        Ok(Target { url, credentials })
    }

    /// IP literals never reach the resolver, so they are checked here.
    pub(crate) fn check_literal_host(&self) -> Result<(), NotifyError> {
        let host = self.url.host_str().unwrap_or_default();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) if is_refused_address(ip) => Err(NotifyError::permanent(format!(
                "refused: {host} is a private address"
            ))),
            _ => Ok(()),
        }
    }
}

fn describe_status(status: StatusCode) -> String {
    let code = status.as_u16();
    let text = match status.canonical_reason() {
        Some(reason) => format!("HTTP {code} {reason}"),
        None => format!("HTTP {code}"),
    };
    if status.is_redirection() {
        format!("{text} (redirects are not followed)")
    } else {
        text
    }
}

fn describe_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn find_source<'a, T: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

fn innermost_cause(err: &(dyn StdError + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{header, HeaderMap, Method, Uri};
    use axum::response::{IntoResponse, Response};
    use axum::Router;
    use base64::Engine;
    use chrono::DateTime;
    use snitch_core::clock::monotonic_now;
    use snitch_core::{
        AlertEmails, CaseId, DeliveryState, EventKind, ManualClock, Notes, SnitchName, Status,
        Tags, Token, WebhookSecret, WebhookUrl,
    };

    use serde_json::{json, Value};
    use snitch_core::Event;

    use super::super::signature::{signature_timestamp, verify_signature};
    use super::*;

    /// One request as the receiver saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        method: Method,
        uri: String,
        headers: HeaderMap,
        body: Vec<u8>,
    }

    type Log = Arc<Mutex<Vec<Seen>>>;

    #[derive(Debug)]
    struct Receiver {
        port: u16,
        log: Log,
    }

    impl Receiver {
        fn url(&self, path_and_query: &str) -> String {
            format!("http://127.0.0.1:{}{path_and_query}", self.port)
        }

        fn seen(&self) -> Vec<Seen> {
            self.log.lock().expect("not poisoned").clone()
        }
    }

    /// A receiver on 127.0.0.1 that records every request. `/no-content` answers 204,
    /// `/fail` 500, `/redirect` a 302 to `/target`, `/slow` 200 after 10 s, anything
    /// else 200.
    async fn receiver() -> Receiver {
        let log = Log::default();
        let app = Router::new().fallback(record).with_state(log.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("bound").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { port, log }
    }

    async fn record(
        State(log): State<Log>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        log.lock().expect("not poisoned").push(Seen {
            method,
            uri: uri.to_string(),
            headers,
            body: body.to_vec(),
        });
        match uri.path() {
            "/no-content" => StatusCode::NO_CONTENT.into_response(),
            "/fail" => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
            "/redirect" => (StatusCode::FOUND, [(header::LOCATION, "/target")]).into_response(),
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late".into_response()
            }
            _ => "ok".into_response(),
        }
    }

    fn notifier(allow_private: bool) -> WebhookNotifier {
        WebhookNotifier::new(WebhookOptions {
            allow_private,
            ..WebhookOptions::default()
        })
        .expect("client builds")
    }

    fn event() -> Event {
        Event {
            id: "abcdefghijklmnop-7".to_owned(),
            kind: EventKind::Missing,
            at: DateTime::parse_from_rfc3339("2026-11-22T10:15:00.25Z")
                .expect("valid")
                .to_utc(),
            case_id: CaseId::parse("acme").expect("valid"),
            token: Token::parse("abcdefghijklmnop").expect("valid"),
            name: SnitchName::parse("Nightly backup").expect("valid"),
            notes: Notes::parse("Call Bob").expect("valid"),
            tags: Tags::parse(&["db", "nightly"]).expect("valid"),
            alert_email: AlertEmails::default(),
            status: Status::Failed,
            previous_status: Status::Healthy,
            checked_in_at: None,
            check_in: None,
            missed_periods: 1,
            expected_at: None,
            expected_at_local: None,
            reason: None,
            run: None,
        }
    }

    fn delivery(url: &str, secret: Option<&str>) -> Delivery {
        let event = event();
        Delivery {
            id: format!("{}-1", event.id),
            event,
            channel: Channel::Webhook {
                hook_id: "hook1".to_owned(),
                url: WebhookUrl::parse(url).expect("valid URL"),
                secret: secret.map(|s| WebhookSecret::parse(s).expect("valid secret")),
            },
            state: DeliveryState::Pending,
            next_attempt_at: None,
            attempts: Vec::new(),
        }
    }

    fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
        seen.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header"))
    }

    #[tokio::test]
    async fn posts_the_body_and_headers_of_the_spec() {
        let rx = receiver().await;
        let n = notifier(true);
        let d = delivery(&rx.url("/hook?x=1"), None);

        assert_eq!(n.send(&d).await, Ok("HTTP 200".to_owned()));
        // A retry carries the same event id.
        assert_eq!(n.send(&d).await, Ok("HTTP 200".to_owned()));

        let seen = rx.seen();
        assert_eq!(seen.len(), 2);
        for s in &seen {
            assert_eq!(s.method, Method::POST);
            assert_eq!(s.uri, "/hook?x=1");
            assert_eq!(header(s, "content-type"), Some("application/json"));
            assert_eq!(
                header(s, "user-agent"),
                Some(
                    format!(
                        "Snitch/{} (+https://github.com/snitch-rs/snitch)",
                        env!("CARGO_PKG_VERSION")
                    )
                    .as_str()
                )
            );
            assert_eq!(header(s, "snitch-event-id"), Some("abcdefghijklmnop-7"));
            assert_eq!(header(s, "authorization"), None);
            assert_eq!(header(s, "snitch-signature"), None);
            let body: Value = serde_json::from_slice(&s.body).expect("JSON body");
            assert_eq!(
                body,
                json!({
                    "type": "snitch.missing",
                    "timestamp": "2026-11-22T10:15:00.250Z",
                    "data": {
                        "snitch": {
                            "token": "abcdefghijklmnop",
                            "name": "Nightly backup",
                            "notes": "Call Bob",
                            "tags": ["db", "nightly"],
                            "status": "missing",
                            "previous_status": "healthy"
                        },
                        "missed_periods": 1,
                        "reason": "missed"
                    }
                })
            );
            assert_eq!(body, webhook_body(&d.event));
        }
    }

    #[tokio::test]
    async fn url_credentials_become_basic_auth_and_leave_the_url() {
        let rx = receiver().await;
        let url = format!("http://us%40er:p%3Ass%20w@127.0.0.1:{}/hook", rx.port);

        assert_eq!(
            notifier(true).send(&delivery(&url, None)).await,
            Ok("HTTP 200".to_owned())
        );

        let seen = rx.seen();
        assert_eq!(seen.len(), 1);
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("us@er:p:ss w")
        );
        assert_eq!(header(&seen[0], "authorization"), Some(expected.as_str()));
        assert_eq!(seen[0].uri, "/hook");
        let host = header(&seen[0], "host").expect("host header");
        assert_eq!(host, format!("127.0.0.1:{}", rx.port));
    }

    #[tokio::test]
    async fn a_hook_with_a_secret_gets_a_verifiable_signature() {
        let rx = receiver().await;
        let clock = Arc::new(ManualClock::new(event().at));
        let n = notifier(true).with_clock(clock);

        assert!(n
            .send(&delivery(&rx.url("/signed"), Some("s3cret")))
            .await
            .is_ok());
        assert!(n.send(&delivery(&rx.url("/plain"), None)).await.is_ok());

        let seen = rx.seen();
        assert_eq!(seen.len(), 2);
        let signature = header(&seen[0], "snitch-signature").expect("signed");
        assert!(verify_signature("s3cret", signature, &seen[0].body));
        assert!(!verify_signature("other", signature, &seen[0].body));
        assert!(!verify_signature("s3cret", signature, b"{}"));
        let t = event().at.timestamp();
        assert_eq!(signature_timestamp(signature), Some(t));
        assert_eq!(signature, signature_header("s3cret", t, &seen[0].body));
        assert_eq!(header(&seen[1], "snitch-signature"), None);
    }

    #[tokio::test]
    async fn any_2xx_is_a_success() {
        let rx = receiver().await;
        let n = notifier(true);
        assert_eq!(
            n.send(&delivery(&rx.url("/ok"), None)).await,
            Ok("HTTP 200".to_owned())
        );
        assert_eq!(
            n.send(&delivery(&rx.url("/no-content"), None)).await,
            Ok("HTTP 204".to_owned())
        );
    }

    #[tokio::test]
    async fn a_500_is_a_failure() {
        let rx = receiver().await;
        let err = notifier(true)
            .send(&delivery(&rx.url("/fail"), None))
            .await
            .expect_err("500 fails");
        assert_eq!(err.detail, "HTTP 500 Internal Server Error");
        assert!(!err.permanent, "retried");
        assert_eq!(rx.seen().len(), 1);
    }

    #[tokio::test]
    async fn a_redirect_is_a_failure_and_never_followed() {
        let rx = receiver().await;
        let err = notifier(true)
            .send(&delivery(&rx.url("/redirect"), None))
            .await
            .expect_err("302 fails");
        assert_eq!(err.detail, "HTTP 302 Found (redirects are not followed)");
        let paths: Vec<String> = rx.seen().into_iter().map(|s| s.uri).collect();
        assert_eq!(paths, ["/redirect"], "the target is never hit");
    }

    #[tokio::test]
    async fn a_slow_receiver_times_out() {
        let rx = receiver().await;
        let n = WebhookNotifier::new(WebhookOptions {
            allow_private: true,
            timeout: Duration::from_millis(200),
            ..WebhookOptions::default()
        })
        .expect("client builds");
        let started = monotonic_now();
        let err = n
            .send(&delivery(&rx.url("/slow"), None))
            .await
            .expect_err("times out");
        assert_eq!(err.detail, "timed out after 200 ms");
        assert!(!err.permanent, "retried");
        // The receiver answers after 10 s; the attempt gives up long before.
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connection_failure() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("bound").port()
        };
        let err = notifier(true)
            .send(&delivery(&format!("http://127.0.0.1:{port}/"), None))
            .await
            .expect_err("nothing listens");
        assert!(
            err.detail.starts_with("connection failed: "),
            "{}",
            err.detail
        );
        assert!(!err.detail.contains("127.0.0.1"), "{}", err.detail);
        assert!(!err.permanent, "retried");
    }

    /// A connect that never completes (a listener whose accept queue is full drops new
    /// SYNs, on loopback) fails after the connect timeout, long before the hard one.
    #[tokio::test]
    async fn a_connect_that_never_completes_fails_after_the_connect_timeout() {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("valid"))
            .expect("bind");
        let listener = socket.listen(1).expect("listen");
        let addr = listener.local_addr().expect("bound");
        // Fill the accept queue (nothing accepts): the first connect that hangs shows it
        // is full.
        let mut held = Vec::new();
        loop {
            let connecting = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(500), connecting).await {
                Ok(Ok(stream)) => held.push(stream),
                Ok(Err(e)) => panic!("connect failed instead of hanging: {e}"),
                Err(_) => break,
            }
            assert!(held.len() < 100, "the accept queue never filled");
        }
        let n = WebhookNotifier::new(WebhookOptions {
            allow_private: true,
            connect_timeout: Duration::from_millis(300),
            ..WebhookOptions::default()
        })
        .expect("client builds");
        let started = monotonic_now();
        let err = n
            .send(&delivery(&format!("http://{addr}/"), None))
            .await
            .expect_err("never connects");
        let took = started.elapsed();
        assert_eq!(err.detail, "connection timed out after 300 ms");
        assert!(!err.permanent, "retried");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        // The hard timeout is 30 s; the connect timeout ends it far sooner.
        assert!(took < Duration::from_secs(10), "{took:?}");
        drop(listener);
    }

    #[tokio::test]
    async fn private_targets_are_refused_by_default() {
        let rx = receiver().await;
        let n = notifier(false);

        let err = n
            .send(&delivery(&rx.url("/"), None))
            .await
            .expect_err("loopback literal refused");
        assert_eq!(err.detail, "refused: 127.0.0.1 is a private address");
        assert!(err.permanent, "never retried");

        let err = n
            .send(&delivery(&format!("http://[::1]:{}/", rx.port), None))
            .await
            .expect_err("IPv6 loopback literal refused");
        assert_eq!(err.detail, "refused: [::1] is a private address");
        assert!(err.permanent, "never retried");

        let err = n
            .send(&delivery(
                &format!("http://u:p@localhost:{}/", rx.port),
                Some("s"),
            ))
            .await
            .expect_err("a name resolving to loopback is refused");
        assert_eq!(
            err.detail,
            "refused: localhost resolves only to private addresses"
        );
        assert!(err.permanent, "never retried");

        assert!(rx.seen().is_empty(), "the receiver sees nothing");
    }

    #[tokio::test]
    async fn an_email_delivery_is_not_for_this_notifier() {
        let mut d = delivery("https://hooks.example.com/x", None);
        d.channel = Channel::Email { to: Vec::new() };
        let err = notifier(false).send(&d).await.expect_err("wrong channel");
        assert_eq!(err.detail, "not a webhook delivery");
        assert!(err.permanent);
    }

    #[test]
    fn the_default_options_follow_the_spec() {
        let o = WebhookOptions::default();
        assert!(!o.allow_private);
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.connect_timeout, Duration::from_secs(5));
        assert!(o.user_agent.starts_with("Snitch/"));
        assert!(o
            .user_agent
            .ends_with(" (+https://github.com/snitch-rs/snitch)"));
    }
}
