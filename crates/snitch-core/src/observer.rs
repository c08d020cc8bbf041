//! What adapters tell the server's metrics, without knowing them: each check-in's outcome
//! (the check-in endpoint, the e-mail listener) and each delivery attempt (the
//! dispatcher). `snitch-http`'s `Metrics` implements both observers.

use std::net::{IpAddr, Ipv6Addr};

/// How a check-in ended, as counted (`snitch_check_ins_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckInOutcome {
    /// Recorded, reporting success.
    Success,
    /// Recorded, reporting an error (a non-zero exit status).
    Error,
    /// No snitch has the token.
    UnknownToken,
    /// Not recorded: the store failed (the client got a 5xx, or SMTP a 4xx).
    Failed,
    /// Recorded, a run's start.
    Start,
    /// Recorded, output only (`/log`).
    Log,
}

/// Told of every check-in an adapter took in.
pub trait CheckInObserver: Send + Sync {
    /// A check-in ended as `outcome`.
    fn check_in(&self, outcome: CheckInOutcome);
}

/// How a delivery attempt ended, as counted (`snitch_deliveries_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Delivered.
    Delivered,
    /// Failed; tried again later.
    Retry,
    /// Failed for good (permanent, or past the retry window).
    Failed,
}

impl DeliveryOutcome {
    /// The label value: `delivered`, `retry` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retry => "retry",
            DeliveryOutcome::Failed => "failed",
        }
    }
}

/// Told of every delivery attempt by the dispatcher: the server's metrics count them.
pub trait DeliveryObserver: Send + Sync {
    /// An attempt through a channel of kind `channel` ended as `outcome`; `latency`, for a
    /// delivery that went through, is the time from its event.
    fn delivery(
        &self,
        channel: &'static str,
        outcome: DeliveryOutcome,
        latency: Option<std::time::Duration>,
    );
}

/// The address a client is limited by (docs/rules.md#hostile-input): itself, or its /64
/// for IPv6 (one host usually holds a whole /64); an IPv4-mapped address is its IPv4 one.
pub fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        },
        v4 => v4,
    }
}
