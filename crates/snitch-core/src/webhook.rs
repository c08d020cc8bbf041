//! Webhook registrations of a case (docs/rules.md#administration).

use std::fmt;

use crate::calendar::Timestamp;
use crate::types::CaseId;
use crate::validation::Validation;

/// The longest hook URL, in characters.
pub const WEBHOOK_URL_MAX_CHARS: usize = 2_048;
/// The longest hook secret, in characters.
pub const WEBHOOK_SECRET_MAX_CHARS: usize = 256;

/// Where a hook is POSTed: an absolute `http` or `https` URL with a host. Credentials in
/// the URL are sent as HTTP Basic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WebhookUrl(String);

impl WebhookUrl {
    /// Parses an absolute `http` or `https` URL of at most [`WEBHOOK_URL_MAX_CHARS`].
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        let invalid = || Validation::new("url", "must be an http or https URL with a host");
        crate::types::refuse_nul("url", raw)?;
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(Validation::new("url", crate::types::BLANK));
        }
        if raw.chars().count() > WEBHOOK_URL_MAX_CHARS {
            return Err(Validation::new(
                "url",
                format!("is too long (maximum is {WEBHOOK_URL_MAX_CHARS} characters)"),
            ));
        }
        let url = url::Url::parse(raw).map_err(|_| invalid())?;
        let has_host = url.host_str().is_some_and(|h| !h.is_empty());
        if !matches!(url.scheme(), "http" | "https") || !has_host {
            return Err(invalid());
        }
        Ok(WebhookUrl(url.to_string()))
    }

    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Where requests to this URL go, as `host:port` (the scheme's default port when none
    /// is given; IPv6 hosts in brackets; never the credentials): the key that caps
    /// concurrent deliveries per destination.
    pub fn destination(&self) -> String {
        match url::Url::parse(&self.0) {
            Ok(url) => format!(
                "{}:{}",
                url.host_str().unwrap_or_default(),
                url.port_or_known_default().unwrap_or_default()
            ),
            // Parsed when it was made, so this does not happen; the URL is its own key.
            Err(_) => self.0.clone(),
        }
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The optional signing secret of a hook: 1 to 256 characters, never shown again.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(String);

impl WebhookSecret {
    /// Parses a secret of at most [`WEBHOOK_SECRET_MAX_CHARS`].
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        crate::types::refuse_nul("secret", raw)?;
        if raw.is_empty() {
            return Err(Validation::new("secret", crate::types::BLANK));
        }
        if raw.chars().count() > WEBHOOK_SECRET_MAX_CHARS {
            return Err(Validation::new(
                "secret",
                format!("is too long (maximum is {WEBHOOK_SECRET_MAX_CHARS} characters)"),
            ));
        }
        Ok(WebhookSecret(raw.to_owned()))
    }

    /// The secret itself (never printed: `Debug` hides it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(…)")
    }
}

/// One registered hook of a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// Random, `[a-z0-9]`, unique.
    pub id: String,
    /// The case whose events it receives.
    pub case_id: CaseId,
    /// Where events are POSTed.
    pub url: WebhookUrl,
    /// The secret that signs payloads, if any.
    pub secret: Option<WebhookSecret>,
    /// When it was registered.
    pub created_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http_with_a_host() {
        assert!(WebhookUrl::parse("https://user:pw@hooks.acme.test/snitch").is_ok());
        assert!(WebhookUrl::parse("http://127.0.0.1:9000/x").is_ok());
        for bad in [
            "",
            "ftp://x.test/",
            "https://",
            "/relative",
            "mailto:a@b.test",
            "not a url",
        ] {
            let err = WebhookUrl::parse(bad).expect_err(bad);
            assert_eq!(err.attribute, "url", "{bad}");
        }
    }

    #[test]
    fn the_destination_is_host_and_port_without_credentials() {
        let dest = |u: &str| WebhookUrl::parse(u).expect("valid").destination();
        assert_eq!(
            dest("https://user:pw@Hooks.Acme.test/snitch"),
            "hooks.acme.test:443"
        );
        assert_eq!(dest("http://hooks.acme.test/x?y=1"), "hooks.acme.test:80");
        assert_eq!(dest("http://127.0.0.1:9000/x"), "127.0.0.1:9000");
        assert_eq!(dest("https://[::1]:8443/"), "[::1]:8443");
        assert_eq!(dest("https://hooks.acme.test:443/"), "hooks.acme.test:443");
    }

    #[test]
    fn secrets_are_bounded_and_hidden_from_debug() {
        let s = WebhookSecret::parse("s3cret").expect("valid");
        assert!(!format!("{s:?}").contains("s3cret"));
        assert!(WebhookSecret::parse("").is_err());
        assert!(WebhookSecret::parse(&"x".repeat(257)).is_err());
    }
}
