//! A project page of the simple repository API, read into [`ProjectFile`]s:
//! the JSON form (PEP 691) or the HTML form (PEP 503, with PEP 592 yanking,
//! PEP 658/714 metadata files and `data-requires-python`).
//!
//! Links are resolved against the page's URL (or its `<base href>`); links
//! that are not http(s), files without a plain name, and anchors that are not
//! files are skipped.
//!
//! Pages come from indexes: both readers are linear in the page's length
//! (serde_json for JSON; for HTML, every byte is looked at a bounded number
//! of times), and the caller caps the length and runs them on a blocking
//! thread.

use std::collections::HashMap;

use reqwest::Url;
use serde::Deserialize;

use super::project_file::{FileLocation, ProjectFile, is_plain_filename, sha256_hex};
use crate::sandbox::PackageSource;

/// Most characters of an index's API version quoted in a message.
const MAX_VERSION_CHARS: usize = 40;
/// Most characters of the JSON parser's complaint quoted in a message.
const MAX_QUOTED_CHARS: usize = 300;

/// Why a project page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// An HTML page whose bytes are not UTF-8.
    #[error("the HTML page is not UTF-8")]
    NotUtf8,
    /// A JSON page that does not parse as the simple API's (shown cut
    /// short: the parser quotes what it read, which the index chose).
    #[error(
        "the JSON page does not parse: {}",
        super::message_text::clip(&.0.to_string(), MAX_QUOTED_CHARS)
    )]
    Json(#[source] serde_json::Error),
    /// A JSON page of an API version this server does not speak.
    #[error("the index speaks simple API version {0}; this server understands 1.x")]
    ApiVersion(String),
}

/// Whether a `Content-Type` is the JSON form.
pub fn is_json(content_type: &str) -> bool {
    let ct = content_type.to_ascii_lowercase();
    ct.contains("json")
}

/// Reads a project page served as `content_type` from `page_url`.
pub fn parse_page(
    body: &[u8],
    content_type: &str,
    page_url: &Url,
) -> Result<Vec<ProjectFile>, PageError> {
    if is_json(content_type) {
        parse_json(body, page_url)
    } else {
        let text = std::str::from_utf8(body).map_err(|_| PageError::NotUtf8)?;
        Ok(parse_html(text, page_url))
    }
}

#[derive(Deserialize)]
struct JsonPage {
    #[serde(default)]
    meta: Option<JsonMeta>,
    #[serde(default)]
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
struct JsonMeta {
    #[serde(rename = "api-version", default)]
    api_version: Option<String>,
}

#[derive(Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: HashMap<String, String>,
    #[serde(rename = "requires-python", default)]
    requires_python: Option<String>,
    #[serde(default)]
    yanked: Option<BoolOrText>,
    #[serde(rename = "core-metadata", default)]
    core_metadata: Option<MetadataFlag>,
    #[serde(rename = "dist-info-metadata", default)]
    dist_info_metadata: Option<MetadataFlag>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum BoolOrText {
    Bool(bool),
    Text(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum MetadataFlag {
    Bool(bool),
    Hashes(HashMap<String, String>),
}

impl MetadataFlag {
    fn available(self) -> Option<Option<String>> {
        match self {
            Self::Bool(true) => Some(None),
            Self::Bool(false) => None,
            Self::Hashes(h) => Some(h.get("sha256").and_then(|s| sha256_hex(s))),
        }
    }
}

/// Reads the JSON form.
pub fn parse_json(body: &[u8], page_url: &Url) -> Result<Vec<ProjectFile>, PageError> {
    let page: JsonPage = serde_json::from_slice(body).map_err(PageError::Json)?;
    if let Some(version) = page.meta.and_then(|m| m.api_version)
        && version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(1)
            > 1
    {
        return Err(PageError::ApiVersion(super::message_text::clip(
            &version,
            MAX_VERSION_CHARS,
        )));
    }
    let mut files = Vec::new();
    for f in page.files {
        let Some(url) = resolve(page_url, &f.url) else {
            continue;
        };
        if !is_plain_filename(&f.filename) {
            continue;
        }
        files.push(ProjectFile {
            filename: f.filename,
            location: FileLocation::Url(url),
            sha256: f.hashes.get("sha256").and_then(|s| sha256_hex(s)),
            requires_python: f.requires_python.filter(|s| !s.trim().is_empty()),
            yanked: match f.yanked {
                Some(BoolOrText::Bool(true)) => Some(String::new()),
                Some(BoolOrText::Text(reason)) => Some(reason),
                _ => None,
            },
            metadata: f
                .core_metadata
                .or(f.dist_info_metadata)
                .and_then(MetadataFlag::available),
            source: PackageSource::Index,
        });
    }
    Ok(files)
}

/// Resolves a link; `None` unless it is http(s). The fragment is kept.
fn resolve(base: &Url, href: &str) -> Option<Url> {
    let url = base.join(href.trim()).ok()?;
    matches!(url.scheme(), "http" | "https").then_some(url)
}

/// Reads the HTML form. Tolerant: anything that is not a file link is skipped.
pub fn parse_html(text: &str, page_url: &Url) -> Vec<ProjectFile> {
    let lower = text.to_ascii_lowercase();
    let mut base = page_url.clone();
    let mut files = Vec::new();
    let mut pos = 0;
    while let Some(offset) = lower[pos..].find('<') {
        let start = pos + offset;
        let rest = &lower[start + 1..];
        if rest.starts_with("!--") {
            pos = match lower[start..].find("-->") {
                Some(end) => start + end + 3,
                None => break,
            };
            continue;
        }
        // Only `a` and `base` matter: a name is looked at for at most
        // five bytes, so a page of `<` or `<aaaa...` is read in linear time.
        let probe = &rest.as_bytes()[..rest.len().min(5)];
        let tag_name_end = probe
            .iter()
            .position(|&b| b.is_ascii_whitespace() || b == b'>' || b == b'/')
            .unwrap_or(probe.len());
        let ends = tag_name_end < probe.len() || tag_name_end == rest.len();
        let tag = if ends { &rest[..tag_name_end] } else { "" };
        if tag != "a" && tag != "base" {
            pos = start + 1;
            continue;
        }
        let attrs_start = start + 1 + tag_name_end;
        let (attrs, after) = attributes(text, attrs_start);
        pos = after;
        let get = |name: &str| {
            attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if tag == "base" {
            if let Some(url) = get("href").and_then(|h| page_url.join(h).ok()) {
                base = url;
            }
            continue;
        }
        let content_end = lower[after..].find('<').map_or(text.len(), |e| after + e);
        let content = unescape(text[after..content_end].trim());
        let Some(href) = get("href") else { continue };
        let Some(mut url) = resolve(&base, href) else {
            continue;
        };
        let sha256 = url
            .fragment()
            .and_then(|f| f.strip_prefix("sha256="))
            .and_then(sha256_hex);
        url.set_fragment(None);
        let filename = if content.is_empty() {
            url.path_segments()
                .and_then(|mut s| s.next_back())
                .map(percent_decode)
                .unwrap_or_default()
        } else {
            content
        };
        if !is_plain_filename(&filename) {
            continue;
        }
        let metadata = get("data-core-metadata")
            .or_else(|| get("data-dist-info-metadata"))
            .and_then(|v| match v.trim() {
                "true" => Some(None),
                other => other
                    .strip_prefix("sha256=")
                    .map(sha256_hex)
                    .filter(Option::is_some),
            });
        files.push(ProjectFile {
            filename,
            location: FileLocation::Url(url),
            sha256,
            requires_python: get("data-requires-python")
                .map(str::to_owned)
                .filter(|s| !s.trim().is_empty()),
            yanked: get("data-yanked").map(str::to_owned),
            metadata,
            source: PackageSource::Index,
        });
    }
    files
}

/// Reads a tag's attributes from `text[start..]` up to its `>`; returns them
/// (names lowercased, values unescaped) and the index after the `>`.
fn attributes(text: &str, start: usize) -> (Vec<(String, String)>, usize) {
    let bytes = text.as_bytes();
    let mut i = start;
    let mut attrs = Vec::new();
    loop {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'/') {
            i += 1;
        }
        if i >= bytes.len() {
            return (attrs, i);
        }
        if bytes[i] == b'>' {
            return (attrs, i + 1);
        }
        let name_start = i;
        while i < bytes.len()
            && !bytes[i].is_ascii_whitespace()
            && !matches!(bytes[i], b'=' | b'>' | b'/')
        {
            i += 1;
        }
        let name = text[name_start..i].to_ascii_lowercase();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            let value = if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
                let quote = bytes[i];
                let value_start = i + 1;
                let end = bytes[value_start..]
                    .iter()
                    .position(|&b| b == quote)
                    .map_or(bytes.len(), |p| value_start + p);
                i = (end + 1).min(bytes.len());
                &text[value_start..end]
            } else {
                let value_start = i;
                while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'>' {
                    i += 1;
                }
                &text[value_start..i]
            };
            attrs.push((name, unescape(value)));
        } else if !name.is_empty() {
            attrs.push((name, String::new()));
        } else {
            i += 1;
        }
    }
}

/// Decodes the HTML character references an index uses.
fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let window = &rest.as_bytes()[..rest.len().min(12)];
        let Some(semi) = window.iter().position(|&b| b == b';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Decodes `%XX` escapes of a URL path segment (invalid UTF-8 is replaced).
pub fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex_value(bytes[i + 1]), hex_value(bytes[i + 2]))
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of one hex digit.
fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Url {
        Url::parse("https://index.test/simple/demo/").unwrap()
    }

    const HASH: &str = "aa00000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn the_json_form_reads_hashes_yanks_and_metadata() {
        let body = format!(
            r#"{{"meta": {{"api-version": "1.1"}}, "name": "demo", "files": [
            {{"filename": "demo-1.0-py3-none-any.whl", "url": "../../files/demo-1.0-py3-none-any.whl",
              "hashes": {{"sha256": "{HASH}"}}, "requires-python": ">=3.8", "core-metadata": {{"sha256": "{HASH}"}}}},
            {{"filename": "demo-0.9.tar.gz", "url": "https://files.test/demo-0.9.tar.gz", "hashes": {{}}, "yanked": "broken"}},
            {{"filename": "demo-0.8.tar.gz", "url": "https://files.test/demo-0.8.tar.gz", "hashes": {{}}, "yanked": true, "dist-info-metadata": true}},
            {{"filename": "../evil.whl", "url": "https://files.test/x", "hashes": {{}}}},
            {{"filename": "demo-0.1.tar.gz", "url": "file:///etc/passwd", "hashes": {{}}}}
        ]}}"#
        );
        let files = parse_page(
            body.as_bytes(),
            "application/vnd.pypi.simple.v1+json",
            &page(),
        )
        .unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(
            files[0].location,
            FileLocation::Url(
                Url::parse("https://index.test/files/demo-1.0-py3-none-any.whl").unwrap()
            )
        );
        assert_eq!(files[0].sha256.as_deref(), Some(HASH));
        assert_eq!(files[0].requires_python.as_deref(), Some(">=3.8"));
        assert_eq!(files[0].metadata, Some(Some(HASH.to_owned())));
        assert_eq!(files[0].yanked, None);
        assert_eq!(files[1].yanked.as_deref(), Some("broken"));
        assert_eq!(files[2].yanked.as_deref(), Some(""));
        assert_eq!(files[2].metadata, Some(None));
    }

    #[test]
    fn a_newer_major_api_version_is_refused() {
        let err =
            parse_json(br#"{"meta": {"api-version": "2.0"}, "files": []}"#, &page()).unwrap_err();
        assert!(
            matches!(&err, PageError::ApiVersion(v) if v == "2.0"),
            "{err:?}"
        );
        assert!(err.to_string().contains("2.0"), "{err}");
        assert!(matches!(
            parse_json(b"not json", &page()),
            Err(PageError::Json(_))
        ));
        assert!(matches!(
            parse_page(b"\xff\xfe", "text/html", &page()),
            Err(PageError::NotUtf8)
        ));
    }

    #[test]
    fn the_html_form_reads_links_hashes_and_data_attributes() {
        let html = format!(
            r#"<!DOCTYPE html><html><head><title>Links for demo</title></head><body>
<h1>Links for demo</h1>
<!-- <a href="commented.whl">commented-1.0-py3-none-any.whl</a> -->
<A HREF="../../files/demo-1.0-py3-none-any.whl#sha256={HASH}" data-requires-python="&gt;=3.8" data-dist-info-metadata="sha256={HASH}">demo-1.0-py3-none-any.whl</A><br/>
<a href='https://files.test/demo-0.9.tar.gz#md5=abc' data-yanked>demo-0.9.tar.gz</a>
<a href=https://files.test/demo-0.8.tar.gz data-yanked="bad &amp; broken" data-core-metadata="true"></a>
<a href="javascript:alert(1)">demo-0.7.tar.gz</a>
<a name="anchor">not a link</a>
</body></html>"#
        );
        let files = parse_page(html.as_bytes(), "text/html", &page()).unwrap();
        assert_eq!(files.len(), 3, "{files:#?}");
        assert_eq!(files[0].filename, "demo-1.0-py3-none-any.whl");
        assert_eq!(
            files[0].location,
            FileLocation::Url(
                Url::parse("https://index.test/files/demo-1.0-py3-none-any.whl").unwrap()
            )
        );
        assert_eq!(files[0].sha256.as_deref(), Some(HASH));
        assert_eq!(files[0].requires_python.as_deref(), Some(">=3.8"));
        assert_eq!(files[0].metadata, Some(Some(HASH.to_owned())));
        assert_eq!(files[1].sha256, None, "only sha256 counts");
        assert_eq!(files[1].yanked.as_deref(), Some(""));
        assert_eq!(
            files[2].filename, "demo-0.8.tar.gz",
            "the name comes from the URL"
        );
        assert_eq!(files[2].yanked.as_deref(), Some("bad & broken"));
        assert_eq!(files[2].metadata, Some(None));
    }

    #[test]
    fn a_base_element_changes_where_links_resolve() {
        let html = r#"<html><head><base href="https://mirror.test/pkgs/"></head>
<a href="demo-1.0.tar.gz">demo-1.0.tar.gz</a></html>"#;
        let files = parse_html(html, &page());
        assert_eq!(
            files[0].location,
            FileLocation::Url(Url::parse("https://mirror.test/pkgs/demo-1.0.tar.gz").unwrap())
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_pages_never_panic(text in "([<>&;#x/='\" a-zA-Z0-9.-]|\\PC){0,200}") {
            let _ = parse_html(&text, &page());
            let _ = parse_json(text.as_bytes(), &page());
        }
    }

    #[test]
    fn pages_built_to_be_slow_are_read_in_linear_time() {
        let started = std::time::Instant::now();
        for page in [
            "<".repeat(1 << 20),
            "<a".repeat(1 << 19),
            "<base".repeat(1 << 18),
            "<!--".repeat(1 << 18),
            format!("{}<a href=x>", "<a href=\"".repeat(1 << 17)),
            "<a href=x>".repeat(1 << 17),
            "&".repeat(1 << 20),
        ] {
            let _ = parse_html(&page, &page_url());
        }
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(2),
            "7 MiB of hostile HTML took {took:?}"
        );
    }

    fn page_url() -> Url {
        page()
    }

    #[test]
    fn garbage_never_panics() {
        for text in [
            "<",
            "<a",
            "<a href=",
            "<a href='x",
            "<!--",
            "&#xffffffff;",
            "<a href=x>&",
            "<base href=\"::\">",
            "\u{1F600}<a href=\"é\">é</a>",
        ] {
            let _ = parse_html(text, &page());
        }
        assert_eq!(unescape("&#x41;&#66;&amp;&bogus;&"), "AB&&bogus;&");
        assert_eq!(percent_decode("a%20b%zz%"), "a b%zz%");
    }
}
