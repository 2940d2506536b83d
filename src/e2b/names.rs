//! Checks of the strings that end up in a request to E2B: template names
//! from clients, and the sandbox id, domain and tokens from E2B's create
//! answer. Each one either names exactly what it should or is refused, so
//! none can change a request's host, path or headers.

/// Longest template name accepted (E2B's own names are far shorter).
const MAX_TEMPLATE: usize = 128;
/// Longest sandbox id accepted (E2B's are about 20 characters).
const MAX_SANDBOX_ID: usize = 64;
/// Longest domain accepted (the limit of a DNS name).
const MAX_DOMAIN: usize = 253;
/// Longest access token accepted.
const MAX_TOKEN: usize = 1024;

/// Whether `name` can be an E2B template: an alias or id (ASCII letters,
/// digits, `-`, `_`, `.`), optionally after a `team/` and before a `:tag`,
/// at most 128 bytes. Nothing else reaches E2B.
pub(crate) fn is_template(name: &str) -> bool {
    let word = |w: &str| {
        !w.is_empty()
            && !w.starts_with('.')
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if name.len() > MAX_TEMPLATE || name.contains("..") {
        return false;
    }
    let (path, tag) = match name.split_once(':') {
        Some((path, tag)) => (path, Some(tag)),
        None => (name, None),
    };
    let mut parts = path.split('/');
    let valid_path = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), None, None) => word(a),
        (Some(team), Some(a), None) => word(team) && word(a),
        _ => false,
    };
    valid_path && tag.is_none_or(word)
}

/// Whether `id` can be E2B's id of a sandbox: ASCII letters, digits and
/// `-`, at most 64 bytes (it becomes part of a host name, a path and a header).
pub(crate) fn is_sandbox_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SANDBOX_ID
        && !id.starts_with('-')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Whether `domain` is a DNS name (labels of ASCII letters, digits and `-`,
/// joined by dots): nothing that could add a port, a user, a path or a query
/// to the sandbox URL it is put in.
pub(crate) fn is_domain(domain: &str) -> bool {
    domain.len() <= MAX_DOMAIN
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Whether `token` can go in a header as it is: visible ASCII, at most 1 KiB.
pub(crate) fn is_token(token: &str) -> bool {
    !token.is_empty() && token.len() <= MAX_TOKEN && token.bytes().all(|b| b.is_ascii_graphic())
}

/// A string shown in an error: at most 64 characters, escaped.
pub(crate) fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(64)
        .flat_map(char::escape_debug)
        .collect();
    if value.chars().count() > 64 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_names_never_paths_queries_or_headers() {
        for good in [
            "code-interpreter-v1",
            "base",
            "my_team/data-science:v2.1",
            "rki5dems9wqfm4r03t7g",
        ] {
            assert!(is_template(good), "{good}");
        }
        let long = "a".repeat(129);
        for bad in [
            "",
            "../x",
            "a/../b",
            "/abs",
            "a/",
            "a/b/c",
            "a?b",
            "a#b",
            "a%2fb",
            "a b",
            "a\r\nX-Evil: 1",
            "a\0b",
            ".hidden",
            "a:",
            "a:b:c",
            long.as_str(),
        ] {
            assert!(!is_template(bad), "{bad:?}");
        }
    }

    #[test]
    fn sandbox_ids_domains_and_tokens_from_e2b_are_checked() {
        assert!(is_sandbox_id("i3k2j4h5g6f7d8s9a0q1w"));
        for bad in [
            "",
            "../x",
            "a.b",
            "a/b",
            "-a",
            "a b",
            "a\nb",
            &"a".repeat(65),
        ] {
            assert!(!is_sandbox_id(bad), "{bad:?}");
        }
        assert!(is_domain("e2b.app"));
        assert!(is_domain("eu-1.sandboxes.example"));
        for bad in [
            "",
            "127.0.0.1:1",
            "evil.example/x",
            "user@evil.example",
            "a..b",
            "a.b?",
            "a.b#",
            "-a.b",
            "a b",
        ] {
            assert!(!is_domain(bad), "{bad:?}");
        }
        assert!(is_token("tok-0123_ABC.xyz="));
        for bad in ["", "a b", "a\r\nb", "a\0", &"t".repeat(1025)] {
            assert!(!is_token(bad), "{bad:?}");
        }
    }

    #[test]
    fn shown_values_are_short_and_escaped() {
        assert_eq!(shown("a\r\nb"), "a\\r\\nb");
        let long = shown(&"x".repeat(10_000));
        assert_eq!(long.chars().count(), 65);
    }
}
