//! The tail of a job's output: the newest bytes, bounded, shared by the threads that
//! copy its stdout and stderr, made valid UTF-8 only when it is sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// The newest `limit` bytes of the output and how many came before them.
#[derive(Debug, Clone)]
pub struct Tail(Arc<Mutex<Ring>>);

#[derive(Debug)]
struct Ring {
    bytes: VecDeque<u8>,
    limit: usize,
    dropped: u64,
}

impl Tail {
    pub fn new(limit: usize) -> Self {
        Tail(Arc::new(Mutex::new(Ring {
            bytes: VecDeque::with_capacity(limit.min(1 << 16)),
            limit,
            dropped: 0,
        })))
    }

    /// Adds output; the oldest goes past the limit.
    pub fn push(&self, chunk: &[u8]) {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = ring.limit;
        let keep = &chunk[chunk.len().saturating_sub(limit)..];
        ring.dropped += (chunk.len() - keep.len()) as u64;
        let overflow = (ring.bytes.len() + keep.len()).saturating_sub(limit);
        ring.bytes.drain(..overflow);
        ring.dropped += overflow as u64;
        ring.bytes.extend(keep);
    }

    /// The tail as valid UTF-8 of at most `limit` bytes: invalid sequences become
    /// U+FFFD; when earlier output was cut, a notice says how much.
    pub fn text(&self, limit: usize) -> String {
        let ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes: Vec<u8> = ring.bytes.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let cut = ring.dropped > 0 || text.len() > limit;
        if !cut {
            return text;
        }
        let notice = format!(
            "[snitch run: the output's first {} bytes are not shown]\n",
            ring.dropped + text.len().saturating_sub(limit) as u64
        );
        let room = limit.saturating_sub(notice.len());
        let mut start = text.len().saturating_sub(room);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        if notice.len() > limit {
            return text[start..].to_owned();
        }
        format!("{notice}{}", &text[start..])
    }

    /// The last non-blank line, trimmed, as valid UTF-8.
    pub fn last_line(&self) -> Option<String> {
        let text = self.text(usize::MAX);
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("[snitch run:"))
            .map(|l| l.chars().filter(|c| !c.is_control()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_newest_bytes_and_says_what_was_cut() {
        let tail = Tail::new(16);
        tail.push(b"first line\n");
        assert_eq!(tail.text(100), "first line\n");
        tail.push(b"second line\nthird\n");
        let text = tail.text(100);
        assert!(text.ends_with("line\nthird\n"), "{text:?}");
        assert!(
            text.starts_with("[snitch run: the output's first 13 bytes"),
            "{text:?}"
        );
        assert_eq!(tail.last_line().as_deref(), Some("third"));
        // A huge chunk keeps only its end.
        tail.push(&[b'x'; 100_000]);
        assert_eq!(tail.text(1_000).matches('x').count(), 16);
    }

    #[test]
    fn invalid_utf8_and_a_cut_inside_a_character_become_valid_text_within_the_limit() {
        let tail = Tail::new(64);
        tail.push(b"ok \xff\xfe then \xe2\x82");
        let text = tail.text(64);
        assert!(text.contains('\u{FFFD}'));
        let long = Tail::new(10_000);
        long.push("é".repeat(6_000).as_bytes());
        let text = long.text(100);
        assert!(text.len() <= 100, "{}", text.len());
        assert!(text.ends_with('é'));
    }
}
