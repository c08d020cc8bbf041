//! The `Snitch-Signature` header: HMAC-SHA256 of `<t>.<body>` keyed with the hook's
//! secret. Needs no HTTP client, so a receiver can verify with it alone.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header carrying the signature of a hook with a secret.
pub const SIGNATURE_HEADER: &str = "Snitch-Signature";

/// The `Snitch-Signature` value for a body signed at `timestamp` (Unix seconds):
/// `t=<timestamp>,v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub fn signature_header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = signing_mac(secret, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    format!("t={timestamp},v1={}", to_hex(&tag))
}

/// Whether a `Snitch-Signature` header is a valid signature of `body` with `secret`
/// (any of its `v1` entries, compared in constant time). It does not look at how old
/// `t` is: check [`signature_timestamp`] against your clock for that.
pub fn verify_signature(secret: &str, header: &str, body: &[u8]) -> bool {
    let Some(timestamp) = header_timestamp(header) else {
        return false;
    };
    header_entries(header)
        .filter(|(key, _)| *key == "v1")
        .filter_map(|(_, value)| from_hex(value))
        .any(|expected| {
            signing_mac(secret, timestamp, body)
                .verify_slice(&expected)
                .is_ok()
        })
}

/// The `t` of a `Snitch-Signature` header: when it was signed, in Unix seconds.
pub fn signature_timestamp(header: &str) -> Option<i64> {
    header_timestamp(header)?.parse().ok()
}

fn header_entries(header: &str) -> impl Iterator<Item = (&str, &str)> {
    header
        .split(',')
        .filter_map(|part| part.trim().split_once('='))
        .map(|(key, value)| (key.trim(), value.trim()))
}

fn header_timestamp(header: &str) -> Option<&str> {
    header_entries(header)
        .find(|(key, _)| *key == "t")
        .map(|(_, value)| value)
        .filter(|t| !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
}

fn signing_mac(secret: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hex_hmac_of_t_dot_body_and_garbage_is_rejected() {
        let header = signature_header("key", 1, b"x");
        assert!(header.starts_with("t=1,v1="));
        assert_eq!(header.len(), "t=1,v1=".len() + 64);
        assert!(verify_signature("key", &header, b"x"));
        assert!(verify_signature(
            "key",
            &format!("v1=00,{}, v2=zz", header.replace(',', " , ")),
            b"x"
        ));
        for bad in ["", "t=1", "v1=ab", "t=,v1=ab", "t=x,v1=ab", "t=1,v1=zz"] {
            assert!(!verify_signature("key", bad, b"x"), "{bad}");
        }
        // The hex is lowercase HMAC-SHA256 of "<t>.<body>".
        let quick = signature_header("key", 0, b"");
        let expected_mac = {
            let mut mac = HmacSha256::new_from_slice(b"key").expect("any length");
            mac.update(b"0.");
            to_hex(&mac.finalize().into_bytes())
        };
        assert_eq!(quick, format!("t=0,v1={expected_mac}"));
        assert_eq!(
            to_hex(&[0x00, 0x0f, 0xa0, 0xff]),
            "000fa0ff",
            "lowercase, zero-padded"
        );
        assert_eq!(from_hex("000fA0ff"), Some(vec![0x00, 0x0f, 0xa0, 0xff]));
        assert_eq!(from_hex("abc"), None);
    }
}
