//! The rules for where the HTTP server listens and which Host headers it
//! answers.

use std::net::SocketAddr;

use crate::auth::AuthSettings;
use crate::config::HttpSettings;

/// An address the server will not listen on as configured.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Anyone who can reach the address could run code: refused without
    /// authorization.
    #[error(
        "refusing to serve on {0} without authorization: anyone who can reach it could run code. Listen on loopback (127.0.0.1:PORT), or configure SANDBOX_AUTH_TOKENS_FILE or SANDBOX_OAUTH_ISSUER"
    )]
    OpenWithoutAuthorization(SocketAddr),
}

/// Refuses an address other than loopback when nothing authorizes requests.
pub fn check(addr: SocketAddr, authorization: bool) -> Result<(), BindError> {
    if authorization || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(BindError::OpenWithoutAuthorization(addr))
    }
}

/// The Host header values the server answers: loopback's, the listening
/// address when it is a specific one, the public URL's, and those configured.
pub fn allowed_hosts(settings: &HttpSettings, auth: &AuthSettings) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let ip = settings.addr.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        hosts.push(ip.to_string());
    }
    if let Some(public) = public_url(auth)
        && let Some(host) = public.host_str()
    {
        hosts.push(host.trim_matches(['[', ']']).to_owned());
        if let Some(port) = public.port() {
            hosts.push(format!("{host}:{port}"));
        }
    }
    hosts.extend(settings.allowed_hosts.iter().cloned());
    hosts
}

/// The Origin header values the server answers: the configured ones, the
/// public URL's, and its own address (`local`, where it listens) under each
/// name it answers to there, with its scheme and port; any other Origin is
/// refused.
pub fn allowed_origins(
    settings: &HttpSettings,
    auth: &AuthSettings,
    local: SocketAddr,
) -> Vec<String> {
    let scheme = if settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let port = local.port();
    let ip = local.ip();
    let mut names: Vec<String> = Vec::new();
    if ip.is_loopback() || ip.is_unspecified() {
        names.extend(["localhost", "127.0.0.1", "[::1]"].map(str::to_owned));
    }
    if !ip.is_unspecified() && !ip.is_loopback() {
        names.push(match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    let mut origins: Vec<String> = names
        .into_iter()
        .map(|name| format!("{scheme}://{name}:{port}"))
        .collect();
    if let Some(public) = public_url(auth) {
        origins.push(public.origin().ascii_serialization());
    }
    origins.extend(settings.allowed_origins.iter().cloned());
    origins
}

fn public_url(auth: &AuthSettings) -> Option<&url::Url> {
    auth.oauth.as_ref().map(|oauth| &oauth.public_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_own_origins_are_its_names_at_its_port() {
        let settings = HttpSettings {
            addr: "127.0.0.1:0".parse().unwrap(),
            allowed_hosts: vec![],
            allowed_origins: vec!["https://app.example:443".into()],
            stateless: false,
            tls: None,
            connections: crate::config::ConnectionLimits {
                max_connections: 1,
                header_timeout: std::time::Duration::from_secs(1),
            },
            sessions: crate::config::SessionLimits::default(),
        };
        let origins = allowed_origins(
            &settings,
            &AuthSettings::default(),
            "127.0.0.1:8801".parse().unwrap(),
        );
        assert_eq!(
            origins,
            [
                "http://localhost:8801",
                "http://127.0.0.1:8801",
                "http://[::1]:8801",
                "https://app.example:443"
            ]
        );
        let origins = allowed_origins(
            &settings,
            &AuthSettings::default(),
            "10.1.2.3:443".parse().unwrap(),
        );
        assert_eq!(origins, ["http://10.1.2.3:443", "https://app.example:443"]);
        let origins = allowed_origins(
            &settings,
            &AuthSettings::default(),
            "[fd00::1]:80".parse().unwrap(),
        );
        assert_eq!(origins[0], "http://[fd00::1]:80");
    }

    #[test]
    fn open_addresses_need_authorization() {
        assert!(check("127.0.0.1:8080".parse().unwrap(), false).is_ok());
        assert!(check("[::1]:8080".parse().unwrap(), false).is_ok());
        let err = check("0.0.0.0:8080".parse().unwrap(), false).unwrap_err();
        assert!(
            err.to_string().contains("SANDBOX_AUTH_TOKENS_FILE"),
            "{err}"
        );
        assert!(check("0.0.0.0:8080".parse().unwrap(), true).is_ok());
    }
}
