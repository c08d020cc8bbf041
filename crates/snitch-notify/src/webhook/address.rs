//! The private-address guard: which addresses a webhook may not reach unless private
//! targets are allowed, and (feature `webhooks`) the resolver that applies it at connect
//! time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether a delivery to this address is refused unless private targets are allowed:
/// loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16,
/// fe80::/10), CGNAT (100.64/10), multicast, unspecified or "this network" (0/8),
/// broadcast, deprecated site-local (fec0::/10), and the IPv4-mapped (`::ffff:a.b.c.d`)
/// and NAT64 (`64:ff9b::a.b.c.d`) forms of refused IPv4 addresses.
pub fn is_refused_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_refused_v4(v4),
        IpAddr::V6(v6) => is_refused_v6(v6),
    }
}

fn is_refused_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        // 0.0.0.0/8: unspecified and "this network".
        || a == 0
        // 100.64.0.0/10: carrier-grade NAT.
        || (a == 100 && (b & 0xc0) == 64)
}

fn is_refused_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_refused_v4(v4);
    }
    let segments = ip.segments();
    // 64:ff9b::/96: the NAT64 well-known prefix embeds an IPv4 address.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., hi, lo] = segments;
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        return is_refused_v4(Ipv4Addr::new(a, b, c, d));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fc00::/7: unique local.
        || (segments[0] & 0xfe00) == 0xfc00
        // fe80::/10: link-local; fec0::/10: deprecated site-local.
        || (segments[0] & 0xffc0) == 0xfe80
        || (segments[0] & 0xffc0) == 0xfec0
}

#[cfg(feature = "webhooks")]
pub(super) use guard::{GuardedResolver, Refused};

/// The resolver side: only with reqwest.
#[cfg(feature = "webhooks")]
mod guard {
    use std::error::Error as StdError;
    use std::fmt;
    use std::net::SocketAddr;

    use reqwest::dns::{Addrs, Name, Resolve, Resolving};

    use super::is_refused_address;

    type BoxError = Box<dyn StdError + Send + Sync>;

    /// A target refused for its address: the detail of the failed attempt.
    #[derive(Debug)]
    pub(crate) struct Refused(String);

    impl fmt::Display for Refused {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl StdError for Refused {}

    /// Resolves with the system resolver, then drops refused addresses unless allowed.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct GuardedResolver {
        pub(crate) allow_private: bool,
    }

    impl Resolve for GuardedResolver {
        fn resolve(&self, name: Name) -> Resolving {
            let allow_private = self.allow_private;
            let host = name.as_str().to_owned();
            Box::pin(async move {
                let found: Vec<SocketAddr> =
                    tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
                if found.is_empty() {
                    return Err(BoxError::from(format!("{host} has no addresses")));
                }
                let kept: Vec<SocketAddr> = found
                    .into_iter()
                    .filter(|addr| allow_private || !is_refused_address(addr.ip()))
                    .collect();
                if kept.is_empty() {
                    return Err(BoxError::from(Refused(format!(
                        "refused: {host} resolves only to private addresses"
                    ))));
                }
                Ok(Box::new(kept.into_iter()) as Addrs)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    #[test]
    fn refused_ipv4_ranges() {
        for refused in [
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
        ] {
            assert!(is_refused_address(ip(refused)), "{refused}");
        }
        for allowed in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.167.1.1",
            "169.253.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "11.0.0.1",
            "93.184.216.34",
        ] {
            assert!(!is_refused_address(ip(allowed)), "{allowed}");
        }
    }

    #[test]
    fn refused_ipv6_ranges() {
        for refused in [
            "::1",
            "::",
            "fc00::1",
            "fd12:3456:789a::1",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
            "ff00::",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:192.168.0.1",
            "::ffff:169.254.169.254",
            "::ffff:100.64.0.1",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_refused_address(ip(refused)), "{refused}");
        }
        for allowed in [
            "2001:4860:4860::8888",
            "2606:4700:4700::1111",
            "fbff::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2001:db8::1",
        ] {
            assert!(!is_refused_address(ip(allowed)), "{allowed}");
        }
    }
}
