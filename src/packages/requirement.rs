//! What the user asked for: `package_name` text split into requirements as
//! pip reads them (`six`, `attrs==23.2.0`, `python-dateutil >= 2.8, < 3`,
//! `requests[socks]`), parsed with `pep508_rs` into normalized names,
//! extras and version specifiers.
//!
//! Direct references (`name @ https://...`, paths) are refused: packages come
//! only from the configured index or wheelhouse.

use std::str::FromStr;

use pep508_rs::VersionOrUrl;
use reqwest::Url;

/// Why requirements given by a user are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// A requirement does not parse.
    #[error(
        "'{input}' is not a requirement pip would accept: {reason}. Write NAME, NAME==VERSION, NAME>=VERSION or NAME[extra], several separated by spaces or commas"
    )]
    BadRequirement {
        /// The requirement as given (escaped, shortened).
        input: String,
        /// What is wrong.
        reason: String,
    },

    /// A requirement is a URL or a path.
    #[error(
        "'{input}' names a URL, a file or a version-control link; only packages from the server's configured index or wheelhouse can be installed: give a package name and version instead (e.g. attrs==23.2.0); a wheel of your own can go into the server's wheelhouse (SANDBOX_WHEELHOUSE)"
    )]
    DirectReference {
        /// The requirement as given.
        input: String,
    },

    /// Too many requirements in one call.
    #[error("{count} packages were named; at most {limit} can be installed in one call")]
    TooManyRequirements {
        /// How many were given.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

/// A PEP 508 requirement. URLs parse with `url::Url` (nothing touches the
/// file system), and are refused by [`parse_requirements`].
pub type Requirement = pep508_rs::Requirement<Url>;

/// Longest requirement accepted, in bytes.
pub const MAX_REQUIREMENT_BYTES: usize = 500;
/// Longest project name accepted.
pub const MAX_NAME_CHARS: usize = 100;
/// Deepest nesting of parentheses in a requirement: `pep508_rs` recurses
/// once per level with no limit of its own, so a deep marker (from an index
/// or a guest's METADATA) would overflow the stack and abort the server.
pub const MAX_MARKER_NESTING: usize = 16;

/// Longest `package_name` text split; longer text is one item, which
/// [`parse_requirement`] refuses for its length.
pub const MAX_PACKAGE_TEXT_BYTES: usize = 64 * 1024;

/// One item being gathered by [`split_requirements`], with what it holds
/// kept as counts so each token is looked at once.
struct Item {
    text: String,
    brackets: isize,
    parens: isize,
    has_op: bool,
}

impl Item {
    fn new(token: &str) -> Self {
        let mut item = Self {
            text: String::new(),
            brackets: 0,
            parens: 0,
            has_op: false,
        };
        item.push(token);
        item
    }

    fn push(&mut self, s: &str) {
        for c in s.chars() {
            match c {
                '[' => self.brackets += 1,
                ']' => self.brackets -= 1,
                '(' => self.parens += 1,
                ')' => self.parens -= 1,
                c if is_op(c) => self.has_op = true,
                _ => {}
            }
        }
        self.text.push_str(s);
    }
}

/// Whether `c` starts or continues a version operator.
fn is_op(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '!' | '~')
}

/// Splits `package_name` text into requirement strings: items are separated
/// by spaces or commas, except that a version specifier written with spaces
/// (`attrs >= 23`, `foo>=1, <2`) or extras with spaces (`a[x, y]`) stay with
/// their name. A requirement with a `;` marker must be given alone. Linear in
/// the text, which is at most [`MAX_PACKAGE_TEXT_BYTES`].
pub fn split_requirements(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.contains(';') || text.len() > MAX_PACKAGE_TEXT_BYTES {
        return if text.is_empty() {
            Vec::new()
        } else {
            vec![text.to_owned()]
        };
    }
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<Item> = None;
    for token in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        if let Some(cur) = current.as_mut() {
            let open_bracket = cur.brackets > 0;
            let open_paren = cur.parens > 0;
            let dangling_op = cur.text.ends_with(is_op);
            if open_bracket || (open_paren && !token.starts_with(is_op)) {
                cur.push(",");
                cur.push(token);
                continue;
            }
            if token.starts_with('@') || cur.text.ends_with('@') {
                cur.push(" ");
                cur.push(token);
                continue;
            }
            if dangling_op || token.starts_with(['[', '(']) {
                cur.push(token);
                continue;
            }
            if token.starts_with(is_op) {
                if cur.has_op {
                    cur.push(",");
                }
                cur.push(token);
                continue;
            }
        }
        if let Some(done) = current.take() {
            out.push(done.text);
        }
        current = Some(Item::new(token));
    }
    out.extend(current.map(|item| item.text));
    out
}

/// Parses requirement strings (as [`split_requirements`] makes them), at most
/// `max` of them.
pub fn parse_requirements(
    items: &[String],
    max: usize,
) -> Result<Vec<Requirement>, RequirementError> {
    if items.is_empty() {
        return Err(RequirementError::BadRequirement {
            input: String::new(),
            reason: "no package was named".into(),
        });
    }
    if items.len() > max {
        return Err(RequirementError::TooManyRequirements {
            count: items.len(),
            limit: max,
        });
    }
    items.iter().map(|item| parse_requirement(item)).collect()
}

/// Parses one requirement string.
pub fn parse_requirement(input: &str) -> Result<Requirement, RequirementError> {
    let bad = |reason: String| RequirementError::BadRequirement {
        input: quote(input),
        reason,
    };
    let input = input.trim_matches(|c: char| c.is_ascii_whitespace());
    if input.len() > MAX_REQUIREMENT_BYTES {
        return Err(bad(format!(
            "it is {} bytes long; requirements are limited to {MAX_REQUIREMENT_BYTES}",
            input.len()
        )));
    }
    if !input.is_ascii() || input.chars().any(|c| c.is_ascii_control()) {
        return Err(bad(
            "it contains control or non-ASCII characters; package names are ASCII".into(),
        ));
    }
    if input.starts_with('-') {
        return Err(bad(
            "options such as --index-url are not accepted; the server's configuration chooses the index".into(),
        ));
    }
    // A URL, a path or a version-control link is refused as such, before
    // the parser can suggest a `name @ URL` form that is refused too.
    if looks_like_a_location(input) {
        return Err(RequirementError::DirectReference {
            input: quote(input),
        });
    }
    let requirement = parse_pep508(input).map_err(|e| bad(e.to_string()))?;
    if matches!(requirement.version_or_url, Some(VersionOrUrl::Url(_))) || input.contains(" @ ") {
        return Err(RequirementError::DirectReference {
            input: quote(input),
        });
    }
    if requirement.name.as_ref().len() > MAX_NAME_CHARS {
        return Err(bad(format!("the name is over {MAX_NAME_CHARS} characters")));
    }
    Ok(requirement)
}

/// Whether a requirement is written as a location rather than a name: a URL
/// (`https://…`, `git+https://…`), or a file path (`./pkg`, `/tmp/x.whl`,
/// `~/x`, `pkg.whl`, `pkg.tar.gz`).
fn looks_like_a_location(input: &str) -> bool {
    let input = input.trim_matches(|c: char| c.is_ascii_whitespace());
    input.contains("://")
        || input.starts_with(['.', '/', '~', '\\'])
        || [".whl", ".tar.gz", ".zip", ".tgz"]
            .iter()
            .any(|ext| input.to_ascii_lowercase().ends_with(ext))
}

/// Parses PEP 508 text (from a user or from an index's metadata) without
/// ever panicking: `pep508_rs` 0.9.2 has an `expect` that fires on a name or
/// extra ending in `.`, `-` or `_` before another character (`a_~`,
/// `a[x_]`), so those are refused here first. The error is the parser's
/// message, without its position drawing (whose `Display` can also panic).
pub fn parse_pep508(text: &str) -> Result<Requirement, Pep508Error> {
    check_nesting(text)?;
    let ends_badly = |s: &str| s.ends_with(['.', '-', '_']);
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let trimmed = text.trim_start();
    let name_len = trimmed
        .find(|c: char| !is_name_char(c))
        .unwrap_or(trimmed.len());
    let name = &trimmed[..name_len];
    if ends_badly(name) {
        return Err(Pep508Error::NameEnd(quote(name)));
    }
    if let Some(inner) = trimmed[name_len..].trim_start().strip_prefix('[') {
        let inner = inner.split(']').next().unwrap_or_default();
        if let Some(extra) = inner
            .split(|c: char| c == ',' || c.is_whitespace())
            .find(|e| ends_badly(e))
        {
            return Err(Pep508Error::ExtraEnd(quote(extra)));
        }
    }
    Requirement::from_str(text).map_err(|e| Pep508Error::Syntax(e.message.to_string()))
}

/// Why PEP 508 text does not parse.
#[derive(Debug, thiserror::Error)]
pub enum Pep508Error {
    /// The name ends in `.`, `-` or `_`.
    #[error("the name '{0}' must end with a letter or digit")]
    NameEnd(String),
    /// An extra ends in `.`, `-` or `_`.
    #[error("the extra '{0}' must end with a letter or digit")]
    ExtraEnd(String),
    /// Parentheses nest deeper than the parser is let go.
    #[error("its parentheses nest more than {0} deep")]
    TooDeep(usize),
    /// The parser's own message.
    #[error("{0}")]
    Syntax(String),
}

/// Refuses text whose parentheses nest deeper than [`MAX_MARKER_NESTING`].
fn check_nesting(text: &str) -> Result<(), Pep508Error> {
    let mut depth = 0usize;
    for b in text.bytes() {
        match b {
            b'(' => {
                depth += 1;
                if depth > MAX_MARKER_NESTING {
                    return Err(Pep508Error::TooDeep(MAX_MARKER_NESTING));
                }
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The version specifiers of a requirement (empty when it has none).
pub fn specifiers(requirement: &Requirement) -> pep440_rs::VersionSpecifiers {
    match &requirement.version_or_url {
        Some(VersionOrUrl::VersionSpecifier(s)) => s.clone(),
        _ => pep440_rs::VersionSpecifiers::empty(),
    }
}

/// User text made safe to quote in a message.
pub fn quote(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(120)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().count() > 120 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_name_text_splits_as_people_write_it() {
        let table: &[(&str, &[&str])] = &[
            ("six", &["six"]),
            ("six attrs", &["six", "attrs"]),
            ("six, attrs,requests", &["six", "attrs", "requests"]),
            ("attrs==23.2.0", &["attrs==23.2.0"]),
            ("attrs == 23.2.0 six", &["attrs==23.2.0", "six"]),
            ("attrs >=23, <24", &["attrs>=23,<24"]),
            ("python-dateutil>=2.8,<3", &["python-dateutil>=2.8,<3"]),
            (
                "requests[socks, security] six",
                &["requests[socks,security]", "six"],
            ),
            ("requests [socks]", &["requests[socks]"]),
            ("foo (>=1.0, <2)", &["foo(>=1.0,<2)"]),
            ("  ", &[]),
            ("six; python_version > '3'", &["six; python_version > '3'"]),
            (
                "pkg @ https://x.test/p.whl six",
                &["pkg @ https://x.test/p.whl", "six"],
            ),
        ];
        for (text, expected) in table {
            assert_eq!(split_requirements(text), *expected, "{text}");
        }
    }

    #[test]
    fn splitting_is_linear_in_the_text() {
        let started = std::time::Instant::now();
        for text in [
            format!("a[{}", " x".repeat(30_000)),
            format!("a{}", " >1".repeat(20_000)),
            format!("a({}", " x".repeat(30_000)),
        ] {
            assert_eq!(split_requirements(&text).len(), 1);
        }
        let huge = "six ".repeat(1 << 20);
        assert_eq!(
            split_requirements(&huge).len(),
            1,
            "one item, refused later"
        );
        assert!(parse_requirements(&split_requirements(&huge), 64).is_err());
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn requirements_parse_with_normalized_names() {
        let r = parse_requirement("Python_Dateutil>=2.8").unwrap();
        assert_eq!(r.name.as_ref(), "python-dateutil");
        assert_eq!(specifiers(&r).to_string(), ">=2.8");
        let r = parse_requirement("Requests[SOCKS]").unwrap();
        assert_eq!(r.name.as_ref(), "requests");
        assert_eq!(r.extras[0].as_ref(), "socks");
        assert!(specifiers(&parse_requirement("six").unwrap()).is_empty());
        for text in [
            "attrs>=23,<24",
            "foo(>=1.0,<2)",
            "six; python_version > '3'",
        ] {
            parse_requirement(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }

    #[test]
    fn locations_are_refused_without_suggesting_a_form_that_is_refused_too() {
        for location in [
            "git+https://example.test/a/b.git",
            "https://example.test/a-1.0-py3-none-any.whl",
            "./local",
            "/tmp/x.whl",
            "~/pkg",
            "dist/pkg-1.0.tar.gz",
        ] {
            let err = parse_requirement(location).unwrap_err();
            assert!(
                matches!(err, RequirementError::DirectReference { .. }),
                "{location}: {err}"
            );
            assert!(!err.to_string().contains("@"), "{err}");
        }
    }

    #[test]
    fn injections_and_urls_are_refused() {
        for bad in [
            "../../x",
            "pkg @ file:///etc/passwd",
            "pkg@https://evil.test/x.whl",
            "--index-url=https://evil.test/",
            "-e .",
            "six\0",
            "six\nattrs",
            "naïve",
            "https://evil.test/x.whl",
            "/etc/passwd",
            ".",
            "six==",
            "six>>1",
            "A_~",
            "six- >=1",
            "a[x_]",
            "a[x_ y]",
            "a.[x]",
        ] {
            assert!(parse_requirement(bad).is_err(), "{bad:?} was accepted");
        }
        let long = "a".repeat(10_000);
        let err = parse_requirement(&long).unwrap_err();
        assert!(
            err.to_string().len() < 400,
            "the message quotes a bounded part"
        );
        assert!(parse_requirement(&"a".repeat(101)).is_err());
        let deep = format!(
            "a; {}python_version > '3'{}",
            "(".repeat(17),
            ")".repeat(17)
        );
        assert!(
            parse_requirement(&deep)
                .unwrap_err()
                .to_string()
                .contains("nest")
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_splits_and_parses_without_panicking(text in "\\PC{0,120}") {
            for item in split_requirements(&text) {
                let _ = parse_requirement(&item).map_err(|e| e.to_string());
            }
        }

        #[test]
        fn requirement_like_text_never_panics(text in "[a-zA-Z0-9_.\\-\\[\\],;<>=!~ '\"()@:/*]{0,60}") {
            let _ = parse_requirement(&text).map_err(|e| e.to_string());
        }
    }

    #[test]
    fn the_number_of_requirements_is_capped() {
        let many: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
        assert!(parse_requirements(&many, 10).is_ok());
        assert!(matches!(
            parse_requirements(&many, 9),
            Err(RequirementError::TooManyRequirements { .. })
        ));
        assert!(parse_requirements(&[], 9).is_err());
    }
}
