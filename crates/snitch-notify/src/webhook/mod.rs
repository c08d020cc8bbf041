//! Webhook deliveries over HTTP(S): docs/rules.md#webhooks and #delivery.
//!
//! [`WebhookNotifier`] POSTs every event to a hook URL as JSON ([`webhook_body`]) with
//! `Content-Type: application/json`, a `User-Agent` naming Snitch, and
//! `Snitch-Event-Id: <event id>` (the same on every retry, so receivers can drop
//! duplicates: delivery is at least once). Credentials in the URL
//! (`https://user:pass@host/…`) are taken out of the URL and sent as HTTP Basic.
//!
//! Only a 2xx answer is a success. Redirects are not followed (a 3xx is a failure), and a
//! request that takes longer than the timeout (30 s by default) fails. Unless
//! [`WebhookOptions::allow_private`] is set, targets on loopback, private, link-local,
//! CGNAT, multicast or unspecified addresses are refused: host names are checked on the
//! addresses they resolve to, at connect time, and IP literals before sending (see
//! [`is_refused_address`]). Requests never go through an HTTP proxy, so that the check
//! applies to the address actually connected to.
//!
//! # Verifying signatures
//!
//! A hook registered with a secret gets each request signed in a header
//!
//! ```text
//! Snitch-Signature: t=1795342500,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//! ```
//!
//! where `t` is when the request was signed (Unix seconds) and `v1` is the lowercase hex
//! HMAC-SHA256, keyed with the secret, of the string `<t>.<body>`: the value of `t`, a
//! dot, and the raw request body exactly as received (bytes, before any JSON parsing).
//!
//! A receiver should:
//!
//! 1. compute the HMAC of `<t>.<raw body>` with its copy of the secret and compare it
//!    with `v1` in constant time (ignore other `v…` entries; more versions may come);
//! 2. check that `t` is recent (for example within 5 minutes of its own clock) to refuse
//!    replays of an old request; a retry is signed afresh, with a new `t`;
//! 3. answer 2xx quickly, and use `Snitch-Event-Id` to ignore an event it already has.
//!
//! Rust receivers can use [`verify_signature`] and [`signature_timestamp`]; they (like
//! [`webhook_body`] and [`is_refused_address`]) need neither the `webhooks` feature nor
//! reqwest:
//!
//! ```
//! use snitch_notify::webhook::{signature_header, signature_timestamp, verify_signature};
//!
//! let body = br#"{"type":"snitch.missing"}"#;
//! // What Snitch sends; a receiver takes it from the `Snitch-Signature` header.
//! let header = signature_header("s3cret", 1_795_342_500, body);
//!
//! assert!(verify_signature("s3cret", &header, body));
//! assert!(!verify_signature("wrong secret", &header, body));
//! assert!(!verify_signature("s3cret", &header, b"{\"type\":\"snitch.reporting\"}"));
//! assert_eq!(signature_timestamp(&header), Some(1_795_342_500));
//! ```
//!
//! The parts: `notifier.rs` ([`WebhookNotifier`], [`WebhookOptions`]; feature `webhooks`),
//! `payload.rs` (the JSON body), `signature.rs` (signing and verifying), `address.rs` (the
//! private-address guard and the resolver that applies it).

pub(crate) mod address;
#[cfg(feature = "webhooks")]
pub(crate) mod notifier;
mod payload;
mod signature;

pub use address::is_refused_address;
#[cfg(feature = "webhooks")]
pub use notifier::{
    default_user_agent, WebhookNotifier, WebhookOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT,
};
pub use payload::{webhook_body, EVENT_ID_HEADER};
pub use signature::{signature_header, signature_timestamp, verify_signature, SIGNATURE_HEADER};
