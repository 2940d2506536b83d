//! [`AuthError`]: why authorization could not be set up. Refusals of single
//! requests are [`crate::auth::challenge::Refusal`]s, not errors.

use std::path::PathBuf;

/// Authorization cannot start with these settings.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The tokens file cannot be read.
    #[error("cannot read the tokens file {path}: {source}; check SANDBOX_AUTH_TOKENS_FILE")]
    TokensFileUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Anyone on the machine could add a token to the tokens file.
    #[error(
        "the tokens file {path} is writable by every user, who could add tokens of their own; run chmod o-w on it"
    )]
    TokensFileWorldWritable {
        /// The file.
        path: PathBuf,
    },
    /// A line of the tokens file is wrong.
    #[error("{path} line {line}: {message}")]
    TokensFileInvalid {
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// What is wrong there and what to write instead.
        message: String,
    },
    /// The HTTP client for the issuer cannot be built.
    #[error("cannot set up HTTPS for the OAuth issuer: {0}")]
    Client(String),
}
