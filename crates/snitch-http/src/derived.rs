//! Identifiers derived from secrets, and path segments built from user text: what channel
//! messages and badge URLs name a snitch by instead of its token.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The first `bytes` bytes (at most 32) of the HMAC-SHA256 of `data` under `key`, in
/// lowercase hex: stable for one key, unlinkable across keys, and no way back to `data`.
pub(crate) fn keyed_hex(key: &[u8], data: &[u8], bytes: usize) -> String {
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

/// Everything but unreserved characters: text made one path segment (a Matrix room id,
/// a tag in a badge URL).
pub(crate) const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
