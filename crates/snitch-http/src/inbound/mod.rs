//! What reaches Snitch other than HTTP: check-ins by e-mail (feature `email-check-ins`).

#[cfg(feature = "email-check-ins")]
pub mod email;
