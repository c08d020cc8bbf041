//! Where snitch tokens come from. Tokens are the secret in check-in URLs, so the default
//! source is random; tests use a deterministic one.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::distributions::{Distribution, Uniform};

use crate::types::{Token, TOKEN_CHARS};

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// Makes new snitch tokens.
pub trait TokenSource: Send + Sync {
    /// A new, random-looking token, unique with overwhelming probability.
    fn new_token(&self) -> Token;
}

/// 20 random characters from `[a-z0-9]` (about 103 bits) from the thread's CSPRNG.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomTokens;

impl TokenSource for RandomTokens {
    fn new_token(&self) -> Token {
        let mut rng = rand::thread_rng();
        let pick = Uniform::from(0..ALPHABET.len());
        let raw: String = (0..TOKEN_CHARS)
            .map(|_| char::from(ALPHABET[pick.sample(&mut rng)]))
            .collect();
        Token::parse(&raw).unwrap_or_else(|_| unreachable!("the alphabet and length are valid"))
    }
}

/// `tok00000000000000001`, `tok00000000000000002`, …: predictable, for tests.
#[derive(Debug, Default)]
pub struct SequentialTokens {
    next: AtomicU64,
}

impl TokenSource for SequentialTokens {
    fn new_token(&self) -> Token {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        Token::parse(&format!("tok{n:017}"))
            .unwrap_or_else(|_| unreachable!("a fixed prefix and digits are valid"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn random_tokens_are_well_formed_and_distinct() {
        let tokens: HashSet<Token> = (0..1000).map(|_| RandomTokens.new_token()).collect();
        assert_eq!(tokens.len(), 1000);
        assert!(tokens.iter().all(|t| t.as_str().len() == TOKEN_CHARS));
    }

    #[test]
    fn sequential_tokens_count_up() {
        let source = SequentialTokens::default();
        assert_eq!(source.new_token().as_str(), "tok00000000000000001");
        assert_eq!(source.new_token().as_str(), "tok00000000000000002");
    }
}
