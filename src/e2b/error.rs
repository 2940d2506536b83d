//! [`E2bError`]: how a call to E2B can fail, worded for the model that reads
//! it (what went wrong, the value at fault, what to do next), and how each
//! failure maps onto the sandbox core's [`SandboxError`].

use std::time::Duration;

use crate::sandbox::{human_bytes, human_duration};

/// Why a call to E2B failed.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    /// The control plane refused the API key (HTTP 401).
    #[error(
        "E2B rejected the API key (HTTP 401: {0}); check E2B_API_KEY (a key from the E2B dashboard, usually starting with e2b_) and restart the server"
    )]
    Unauthorized(String),

    /// The control plane refused the request for this team (HTTP 403).
    #[error(
        "E2B refused the request (HTTP 403: {0}); the team may be blocked or have no access to the template"
    )]
    Forbidden(String),

    /// The template does not exist (HTTP 404 on create).
    #[error(
        "E2B has no template '{template}' ({message}); on e2b, `runtime` names an E2B template with the code interpreter: leave it out to get the default"
    )]
    TemplateNotFound {
        /// The template asked for.
        template: String,
        /// E2B's message.
        message: String,
    },

    /// The sandbox no longer exists on E2B: it expired or was killed.
    #[error(
        "the E2B sandbox '{0}' no longer exists on E2B (it expired or was killed): close it with close_sandbox and create a new one"
    )]
    SandboxGone(String),

    /// E2B's edge answered 502 for the sandbox this time, but the control
    /// plane still knows it (or could not say): a passing failure, not the end.
    #[error(
        "E2B's edge could not reach the E2B sandbox '{0}' this time (HTTP 502), though E2B does not report it gone; try again in a moment, and if it keeps failing close it with close_sandbox and create a new one"
    )]
    Unreachable502(String),

    /// The sandbox lived as long as the team's plan allows.
    #[error(
        "the E2B sandbox '{id}' has reached the longest life E2B allows on this plan ({max}, SANDBOX_E2B_MAX_LIFETIME_SECONDS): E2B will not extend it and stops it then; save what you need (read_file), then close it with close_sandbox and create a new one"
    )]
    MaxLifetimeReached {
        /// The E2B sandbox id.
        id: String,
        /// The plan's maximum, in words.
        max: String,
    },

    /// The sandbox is pausing or resuming (HTTP 409 from E2B's edge).
    #[error(
        "the E2B sandbox '{id}' is pausing or resuming (HTTP 409: {message}); try again in a few seconds"
    )]
    Transitioning {
        /// The E2B sandbox id.
        id: String,
        /// E2B's message.
        message: String,
    },

    /// E2B's edge refused a connection to the sandbox (HTTP 429): too many
    /// at once to it, or the team's limit.
    #[error(
        "E2B's edge refused a connection to the E2B sandbox '{id}' (HTTP 429: {message}): too many connections to it at once, or the team's limit; wait a moment and try again, and close sandboxes you no longer need"
    )]
    SandboxBusy {
        /// The E2B sandbox id.
        id: String,
        /// E2B's message.
        message: String,
    },

    /// E2B's edge refused this server's traffic to the sandbox (HTTP 403).
    #[error(
        "E2B's edge refused this server's traffic to the E2B sandbox '{id}' (HTTP 403: {message}): its traffic access token was not accepted; close it with close_sandbox and create a new one"
    )]
    TrafficRefused {
        /// The E2B sandbox id.
        id: String,
        /// E2B's message.
        message: String,
    },

    /// The sandbox is running but its code interpreter does not answer.
    #[error(
        "the E2B sandbox '{0}' is running but its code interpreter does not answer (port closed); it may still be starting: try again in a moment"
    )]
    PortClosed(String),

    /// A sandbox refused this server's access token (HTTP 401 from envd).
    #[error(
        "the E2B sandbox '{id}' refused this server's access token (HTTP 401: {message}); close it with close_sandbox and create a new one"
    )]
    SandboxUnauthorized {
        /// The E2B sandbox id.
        id: String,
        /// Its message.
        message: String,
    },

    /// E2B kept answering 429 after the retries.
    #[error(
        "E2B is rate-limiting this API key (HTTP 429: {message}){wait}; open sandboxes count against the team's concurrency limit, so close those you no longer need, then try again"
    )]
    RateLimited {
        /// E2B's message.
        message: String,
        /// ", retry after N s" when E2B said how long to wait.
        wait: String,
    },

    /// E2B had trouble of its own (HTTP 5xx) after the retries.
    #[error(
        "E2B answered HTTP {status} to {what}: {message}; this is usually a passing problem on E2B's side: try again in a moment"
    )]
    Server {
        /// The status.
        status: u16,
        /// What was being done.
        what: String,
        /// E2B's message.
        message: String,
    },

    /// E2B refused the request for another reason (another 4xx).
    #[error("E2B refused {what} (HTTP {status}: {message})")]
    Rejected {
        /// The status.
        status: u16,
        /// What was being done.
        what: String,
        /// E2B's message.
        message: String,
    },

    /// E2B could not be reached at all.
    #[error(
        "cannot reach E2B at {url}: {cause}; check the network connection (and E2B_API_URL, E2B_DOMAIN or E2B_SANDBOX_URL if they are set)"
    )]
    Unreachable {
        /// Where the request went (never holds a secret).
        url: String,
        /// What the network layer said.
        cause: String,
    },

    /// E2B did not answer in time.
    #[error("E2B did not answer {what} within {after}; the network or E2B may be slow: try again")]
    TimedOut {
        /// What was being done.
        what: String,
        /// The bound, in words.
        after: String,
    },

    /// E2B answered with a redirect, which this server never follows.
    #[error(
        "E2B answered {what} with a redirect (HTTP {status}) to {target}; redirects are not followed, so that the API key and access tokens never leave the configured address: if E2B moved, set E2B_API_URL, E2B_DOMAIN or E2B_SANDBOX_URL to the new address"
    )]
    Redirected {
        /// What was being done.
        what: String,
        /// The redirect's status.
        status: u16,
        /// The origin (scheme, host, port) it pointed to.
        target: String,
    },

    /// An answer from E2B is larger than this server reads.
    #[error("E2B's answer to {what} is larger than {limit}, more than this server reads{hint}")]
    TooLarge {
        /// What was being done.
        what: String,
        /// The limit, in words.
        limit: String,
        /// What to do about it ("; ..."), or nothing.
        hint: String,
    },

    /// E2B answered something this server cannot read.
    #[error("unexpected answer from E2B to {what}: {detail}")]
    Protocol {
        /// What was being done.
        what: String,
        /// What was wrong with the answer.
        detail: String,
    },

    /// E2B created a sandbox that cannot be reached safely (it is killed).
    #[error("unexpected answer from E2B to {what}: {reason}")]
    Unusable {
        /// What was being done.
        what: String,
        /// What is wrong with the sandbox's description.
        #[source]
        reason: UnusableSandbox,
    },

    /// The request that creates a sandbox ended without an answer (its task
    /// was stopped, e.g. by shutdown).
    #[error("creating the E2B sandbox was interrupted")]
    CreateInterrupted,

    /// The interpreter could not move into the sandbox's working directory.
    #[error(
        "could not make {dir} the working directory of the E2B sandbox's interpreter ({name}: {value}); close the sandbox and create a new one"
    )]
    WorkingDirectory {
        /// The directory.
        dir: String,
        /// The Python exception's name.
        name: String,
        /// The exception's value.
        value: String,
    },

    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client for E2B: {0}")]
    Client(#[source] reqwest::Error),
}

impl E2bError {
    /// A timeout of `what` after `after`.
    pub(crate) fn timed_out(what: impl Into<String>, after: Duration) -> Self {
        Self::TimedOut {
            what: what.into(),
            after: human_duration(after),
        }
    }

    /// An answer to `what` over `limit` bytes; `hint` says what to do ("; ...").
    pub(crate) fn too_large(what: &str, limit: usize, hint: &str) -> Self {
        Self::TooLarge {
            what: what.to_owned(),
            limit: human_bytes(limit as u64),
            hint: hint.to_owned(),
        }
    }

    /// Whether the sandbox is gone for good, so keeping it alive is pointless.
    pub(crate) fn is_gone(&self) -> bool {
        matches!(self, Self::SandboxGone(_))
    }
}

/// Turns a reqwest error into ours, naming the URL without its query.
pub(crate) fn network_error(what: &str, e: reqwest::Error, bound: Duration) -> E2bError {
    if e.is_timeout() {
        return E2bError::timed_out(what, bound);
    }
    let url = e
        .url()
        .map(|u| {
            let mut u = u.clone();
            u.set_query(None);
            u.to_string()
        })
        .unwrap_or_else(|| "its address".to_owned());
    E2bError::Unreachable {
        url,
        cause: cause_chain(&e),
    }
}

/// The sources of an error, joined (reqwest's own text only repeats the URL
/// and says "error sending request"); the error itself when it has none.
fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let Some(first) = e.source() else {
        return e.to_string();
    };
    let mut text = first.to_string();
    let mut source = first.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The e2b backend's errors reach the core whole, as a backend error.
impl From<E2bError> for crate::sandbox::SandboxError {
    fn from(e: E2bError) -> Self {
        Self::Backend(Box::new(e))
    }
}

/// Why a sandbox E2B created cannot be reached safely.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnusableSandbox {
    /// Its domain is not a DNS name (shown shortened and escaped).
    #[error("the sandbox's domain '{0}' is not a DNS name")]
    Domain(String),
    /// One of its tokens cannot go into a header.
    #[error("the {0} is not a usable token (visible ASCII, at most 1 KiB)")]
    Token(&'static str),
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use clap::Parser;

    use super::*;
    use crate::e2b::{ApiKey, E2bBackend, E2bSettings};
    use crate::sandbox::{Backend, SandboxSpec};

    /// A control plane on loopback that knows no template.
    async fn no_templates() -> String {
        let app = Router::new().route(
            "/sandboxes",
            post(|| async {
                (
                    StatusCode::NOT_FOUND,
                    axum::Json(serde_json::json!({"code": 404, "message": "template not found"})),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn an_e2b_failure_reaches_the_core_as_the_e2b_error() {
        let mut settings = E2bSettings::new(ApiKey::new("e2b_test"));
        settings.api_url = no_templates().await;
        let backend = E2bBackend::new(settings).unwrap();
        let cli = crate::cli::Cli::try_parse_from(["mcp-code-sandbox"]).unwrap();
        let limits = crate::config::Config::from_settings(&cli.settings)
            .unwrap()
            .manager
            .limits;
        let spec = SandboxSpec {
            id: "s1".to_owned(),
            limits,
            runtime: Some("no-such-template".to_owned()),
            progress: None,
            allow_hosts: None,
            one_off: false,
        };
        let Err(err) = backend.create(spec).await else {
            panic!("a template E2B does not know must be refused");
        };
        assert!(
            matches!(
                err.backend::<E2bError>(),
                Some(E2bError::TemplateNotFound { template, .. })
                    if template == "no-such-template"
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("E2B has no template 'no-such-template'"),
            "{err}"
        );
    }
}
