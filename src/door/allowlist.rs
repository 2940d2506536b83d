//! `SANDBOX_ALLOW_HOSTS`: the destinations a guest's HTTP requests may go
//! to, as `scheme://host:port` patterns (the port defaults to the scheme's),
//! the host an exact name, an exact IP address, or `*.suffix` (any name
//! under the suffix, not the suffix itself). A sandbox may narrow the
//! server's list at create, never widen it.

use reqwest::Url;

/// One allowed destination pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    scheme: String,
    host: HostMatch,
    port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostMatch {
    /// This name or address (lowercase, as a URL's host prints).
    Exact(String),
    /// Any name ending in `.suffix`.
    Under(String),
}

/// A pattern that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "'{pattern}' is not a host pattern: {why}; write scheme://host:port, e.g. https://data.example.org or https://*.example.org:8443"
)]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub why: String,
}

impl HostPattern {
    /// Parses one pattern.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let bad = |why: &str| PatternError {
            pattern: text.to_owned(),
            why: why.to_owned(),
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme must be http or https"));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(bad("a pattern has no path, query or user"));
        }
        let (host, under) = match rest.strip_prefix("*.") {
            Some(suffix) => (suffix, true),
            None => (rest, false),
        };
        if host.contains('*') {
            return Err(bad("'*' may only start the host, as '*.'"));
        }
        // The URL parser normalises the host (case, IDNA, IP forms) as it
        // will normalise a request's.
        let url = Url::parse(&format!("{scheme}://{host}/")).map_err(|e| bad(&e.to_string()))?;
        let name = url.host_str().ok_or_else(|| bad("no host"))?.to_owned();
        let port = url.port_or_known_default().ok_or_else(|| bad("no port"))?;
        let is_ip = name.starts_with('[') || name.parse::<std::net::Ipv4Addr>().is_ok();
        if under && is_ip {
            return Err(bad("'*.' takes a domain name, not an address"));
        }
        Ok(Self {
            scheme,
            host: if under {
                HostMatch::Under(name)
            } else {
                HostMatch::Exact(name)
            },
            port,
        })
    }

    /// Whether `url` goes where this pattern allows.
    fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        scheme == self.scheme
            && port == self.port
            && match &self.host {
                HostMatch::Exact(name) => host == name,
                HostMatch::Under(suffix) => host
                    .strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            }
    }

    /// Whether everything `other` allows, this allows too.
    fn covers(&self, other: &Self) -> bool {
        match &other.host {
            HostMatch::Exact(name) => self.allows(&other.scheme, name, other.port),
            HostMatch::Under(suffix) => {
                self.scheme == other.scheme
                    && self.port == other.port
                    && match &self.host {
                        HostMatch::Exact(_) => false,
                        HostMatch::Under(mine) => {
                            suffix == mine
                                || suffix
                                    .strip_suffix(mine.as_str())
                                    .is_some_and(|head| head.ends_with('.'))
                        }
                    }
            }
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            HostMatch::Exact(name) => write!(f, "{}://{name}:{}", self.scheme, self.port),
            HostMatch::Under(name) => write!(f, "{}://*.{name}:{}", self.scheme, self.port),
        }
    }
}

/// The destinations allowed: none by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList(Vec<HostPattern>);

impl AllowList {
    /// Parses a comma- (or space-) separated list; empty for none.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        text.split([',', ' ', '\n', '\t'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(HostPattern::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when `url` goes to an allowed destination; otherwise why not,
    /// naming the rule.
    pub fn check(&self, url: &Url) -> Result<(), String> {
        let scheme = url.scheme();
        let origin = origin(url);
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "only http and https go through the door, not {scheme}"
            ));
        }
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err(format!("{url} has no host"));
        };
        if self.0.iter().any(|p| p.allows(scheme, host, port)) {
            return Ok(());
        }
        if self.0.is_empty() {
            return Err(format!(
                "{origin} is not allowed: this server allows no destinations (SANDBOX_ALLOW_HOSTS is empty)"
            ));
        }
        Err(format!(
            "{origin} is not in the allowed hosts (SANDBOX_ALLOW_HOSTS, or the sandbox's allow_hosts): {self}"
        ))
    }

    /// This list narrowed to `asked`: each pattern asked must be one this
    /// list already allows.
    pub fn narrow(&self, asked: &[String]) -> Result<Self, String> {
        let mut narrowed = Vec::new();
        for text in asked {
            let pattern = HostPattern::parse(text).map_err(|e| e.to_string())?;
            if !self.0.iter().any(|mine| mine.covers(&pattern)) {
                return Err(format!(
                    "allow_hosts may only narrow the server's list, and {pattern} is not in it (allowed: {self})"
                ));
            }
            narrowed.push(pattern);
        }
        Ok(Self(narrowed))
    }
}

impl std::fmt::Display for AllowList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let texts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&texts.join(", "))
    }
}

/// `scheme://host:port` of a URL, as requests are recorded.
pub fn origin(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn exact_names_suffixes_schemes_and_ports_are_matched() {
        let list = AllowList::parse(
            "https://data.example.org, https://*.example.net:8443 http://127.0.0.1:8080",
        )
        .unwrap();
        assert!(list.check(&url("https://data.example.org/a.csv")).is_ok());
        assert!(
            list.check(&url("https://DATA.example.org:443/")).is_ok(),
            "case and default port"
        );
        assert!(
            list.check(&url("http://data.example.org/")).is_err(),
            "scheme"
        );
        assert!(
            list.check(&url("https://data.example.org:444/")).is_err(),
            "port"
        );
        assert!(list.check(&url("https://evil-data.example.org/")).is_err());
        assert!(
            list.check(&url("https://data.example.org.evil.test/"))
                .is_err()
        );
        assert!(list.check(&url("https://a.b.example.net:8443/")).is_ok());
        assert!(
            list.check(&url("https://example.net:8443/")).is_err(),
            "the suffix itself"
        );
        assert!(list.check(&url("https://badexample.net:8443/")).is_err());
        assert!(list.check(&url("http://127.0.0.1:8080/x")).is_ok());
        assert!(list.check(&url("http://127.0.0.1:8081/x")).is_err());
        assert!(list.check(&url("file:///etc/passwd")).is_err());
        let refused = list.check(&url("https://other.test/")).unwrap_err();
        assert!(
            refused.contains("SANDBOX_ALLOW_HOSTS") && refused.contains("https://other.test:443"),
            "{refused}"
        );
        assert!(
            AllowList::default()
                .check(&url("https://data.example.org/"))
                .unwrap_err()
                .contains("empty")
        );
    }

    #[test]
    fn bad_patterns_are_refused_with_the_way_to_write_one() {
        for bad in [
            "data.example.org",
            "ftp://x.org",
            "https://x.org/path",
            "https://a*.org",
            "https://*.1.2.3.4",
            "https://u@x.org",
        ] {
            let err = AllowList::parse(bad).unwrap_err();
            assert!(
                err.to_string().contains("scheme://host:port"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_sandbox_may_narrow_the_list_but_not_widen_it() {
        let list = AllowList::parse("https://*.example.org,http://127.0.0.1:9000").unwrap();
        let narrowed = list
            .narrow(&[
                "https://data.example.org".into(),
                "https://*.eu.example.org".into(),
            ])
            .unwrap();
        assert!(narrowed.check(&url("https://data.example.org/")).is_ok());
        assert!(narrowed.check(&url("https://x.eu.example.org/")).is_ok());
        assert!(narrowed.check(&url("https://www.example.org/")).is_err());
        for wider in [
            "https://example.org",
            "https://*.org",
            "http://data.example.org",
            "http://127.0.0.1:9001",
        ] {
            let err = list.narrow(&[wider.into()]).unwrap_err();
            assert!(err.contains("only narrow"), "{wider}: {err}");
        }
    }
}
