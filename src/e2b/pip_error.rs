//! [`PipError`]: why pip, run inside an E2B sandbox, did not install the
//! packages, worded for the model that reads it: what happened to pip, the
//! packages asked for, and how to check or what to try next.

/// How a pip run inside an E2B sandbox failed.
#[derive(Debug, thiserror::Error)]
pub enum PipError {
    /// pip ran past the install timeout and was interrupted.
    #[error(
        "pip did not finish installing {wanted} within {after} in the E2B sandbox; it was interrupted. Last lines of its log:\n{log_tail}"
    )]
    TimedOut {
        /// The requirements, space-separated.
        wanted: String,
        /// The timeout, in words.
        after: String,
        /// The last lines of pip's log.
        log_tail: String,
    },

    /// The call was stopped (cancelled, or the server is shutting down).
    #[error(
        "{reason}: pip was interrupted while installing {wanted} in the E2B sandbox; check with execute_code (e.g. `import importlib.metadata as m; m.version(\"name\")`) whether any of it got installed"
    )]
    Interrupted {
        /// Why it was stopped, in words.
        reason: String,
        /// The requirements, space-separated.
        wanted: String,
    },

    /// pip's output was more than the server reads; the connection was dropped.
    #[error(
        "E2B sent more than {limit} while pip was installing {wanted}, more than this server reads: the connection was dropped, which interrupts pip; check with execute_code (e.g. `import importlib.metadata as m; m.version(\"name\")`) whether any of it got installed"
    )]
    OutputTooLarge {
        /// The limit, in words.
        limit: String,
        /// The requirements, space-separated.
        wanted: String,
    },

    /// The connection to the sandbox broke while pip ran.
    #[error(
        "the connection to the E2B sandbox broke while pip was installing {wanted}; check with execute_code (e.g. `import importlib.metadata as m; m.version(\"name\")`) whether it got installed"
    )]
    ConnectionLost {
        /// The requirements, space-separated.
        wanted: String,
    },

    /// The cell that runs pip raised an exception.
    #[error("installing {wanted} failed in the E2B sandbox: {name}: {value}")]
    Raised {
        /// The requirements, space-separated.
        wanted: String,
        /// The exception's name.
        name: String,
        /// The exception's value.
        value: String,
    },

    /// pip exited with a failure status.
    #[error(
        "pip could not install {wanted} in the E2B sandbox (exit status {status}); check the names and versions. Last lines of its log:\n{log_tail}"
    )]
    Failed {
        /// The requirements, space-separated.
        wanted: String,
        /// Its exit status ("unknown" when the cell gave none).
        status: String,
        /// The last lines of pip's log.
        log_tail: String,
    },

    /// The requirements could not be written into the cell that runs pip.
    #[error("cannot encode the requirements: {0}")]
    Encode(#[source] serde_json::Error),
}

/// Pip in an e2b sandbox's errors reach the core whole, as a backend error.
impl From<PipError> for crate::sandbox::SandboxError {
    fn from(e: PipError) -> Self {
        Self::Backend(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use crate::packages::PackageError;
    use crate::packages::requirement::RequirementError;

    #[test]
    fn a_refused_requirement_stays_the_installers_error() {
        let err = super::super::pip::install_cell(&["./my-project".to_owned()]).unwrap_err();
        assert!(
            matches!(
                err.backend::<PackageError>(),
                Some(PackageError::Requirement(
                    RequirementError::DirectReference { .. }
                ))
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("only packages from the server's configured index"),
            "{err}"
        );
    }
}
