//! Identifiers derived from secrets: what channel messages and badge URLs name a snitch by
//! instead of its token.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The first `bytes` bytes (at most 32) of the HMAC-SHA256 of `data` under `key`, in
/// lowercase hex: stable for one key, unlinkable across keys, and no way back to `data`.
pub fn keyed_hex(key: &[u8], data: &[u8], bytes: usize) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(data);
    mac.finalize()
        .into_bytes()
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An identifier of `token` for the channel of `key`, which cannot check in: the
/// HMAC-SHA256 of the token under the channel's key, 32 hex digits. The same for every
/// event of the snitch, so a recovery resolves the page its failure opened; the
/// dashboard's alert links carry it.
pub fn derived_ref(key: &crate::channel::ChannelKey, token: &str) -> String {
    keyed_hex(key.expose().as_bytes(), token.as_bytes(), 16)
}
