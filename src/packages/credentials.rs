//! [`CredentialRule`]: where index credentials may go.
//!
//! An index configured with a user name and password gets them on every
//! request to its origin (scheme, host and port): its pages, and the files
//! and metadata files it serves itself, so a private index works. They never
//! go to another origin (a file host the index links to), never to plain
//! `http` when the index is `https` (the scheme is part of the origin), and
//! never after a redirect has left the origin, even one that comes back:
//! a request carries them only while every URL it has passed through is on
//! the index's origin.

use reqwest::Url;

use super::settings::{Credentials, IndexUrl};

/// Scheme, host and port of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// The origin of `url`; `None` for URLs without a host.
    pub fn of(url: &Url) -> Option<Self> {
        Some(Self {
            scheme: url.scheme().to_owned(),
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default(),
        })
    }
}

/// The configured credentials, each with the origin it belongs to.
#[derive(Clone, Debug, Default)]
pub struct CredentialRule {
    entries: Vec<(Origin, Credentials)>,
}

impl CredentialRule {
    /// The credentials of `indexes` (the first index of an origin wins).
    pub fn from_indexes(indexes: &[IndexUrl]) -> Self {
        let mut entries: Vec<(Origin, Credentials)> = Vec::new();
        for index in indexes {
            let (Some(credentials), Some(origin)) = (index.credentials(), Origin::of(index.url()))
            else {
                continue;
            };
            if !entries.iter().any(|(o, _)| *o == origin) {
                entries.push((origin, credentials.clone()));
            }
        }
        Self { entries }
    }

    /// The credentials for the last URL of `chain`, a request's URLs in
    /// order (the one asked for, then each redirect): those of the origin
    /// every URL of the chain is on, if there is one.
    pub fn for_request(&self, chain: &[Url]) -> Option<&Credentials> {
        let first = Origin::of(chain.first()?)?;
        if !chain
            .iter()
            .all(|url| Origin::of(url).as_ref() == Some(&first))
        {
            return None;
        }
        self.entries
            .iter()
            .find(|(origin, _)| *origin == first)
            .map(|(_, credentials)| credentials)
    }
}

/// `url` without any user name or password written into it (a page may
/// list such URLs; nothing from a page decides what credentials are sent).
pub fn without_userinfo(url: &Url) -> Url {
    let mut clean = url.clone();
    let _ = clean.set_username("");
    let _ = clean.set_password(None);
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> CredentialRule {
        CredentialRule::from_indexes(&[
            IndexUrl::parse("https://me:pw@index.test/simple/", "SANDBOX_INDEX_URL").unwrap(),
            IndexUrl::parse("https://public.test/simple/", "PIP_EXTRA_INDEX_URL").unwrap(),
        ])
    }

    fn chain(urls: &[&str]) -> Vec<Url> {
        urls.iter().map(|u| Url::parse(u).unwrap()).collect()
    }

    #[test]
    fn credentials_go_to_the_index_origin_only() {
        let rule = rule();
        let to = |urls: &[&str]| rule.for_request(&chain(urls)).map(|c| c.user.clone());
        assert_eq!(
            to(&["https://index.test/simple/six/"]).as_deref(),
            Some("me")
        );
        assert_eq!(
            to(&["https://INDEX.test:443/files/six-1.0-py3-none-any.whl"]).as_deref(),
            Some("me"),
            "files of the same origin"
        );
        assert_eq!(
            to(&["https://index.test/a", "https://index.test/b"]).as_deref(),
            Some("me"),
            "a redirect that stays on the origin"
        );
        for refused in [
            &["https://files.test/six.whl"][..],
            &["http://index.test/simple/six/"],
            &["https://index.test:8443/simple/six/"],
            &["https://index.test/a", "https://cdn.test/b"],
            &[
                "https://index.test/a",
                "https://cdn.test/b",
                "https://index.test/c",
            ],
            &["https://cdn.test/b", "https://index.test/c"],
            &["https://public.test/simple/six/"],
        ] {
            assert!(to(refused).is_none(), "{refused:?}");
        }
    }

    #[test]
    fn userinfo_written_into_a_url_is_dropped() {
        let url = Url::parse("https://evil:x@cdn.test/f.whl").unwrap();
        assert_eq!(without_userinfo(&url).as_str(), "https://cdn.test/f.whl");
    }
}
