//! envd's description of files (proto-JSON `EntryInfo`), and reading a
//! `ListDir` answer with a bound on what is built from it: at most `keep`
//! entries are kept, the rest are only counted, so a listing of millions of
//! entries costs its bytes (which the caller caps) and no more.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::sandbox::EntryKind;

/// A file's metadata as envd describes it (proto-JSON `EntryInfo`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct EntryInfo {
    /// The file's name.
    pub name: String,
    /// What it is; `None` when envd does not say.
    #[serde(rename = "type", deserialize_with = "file_type")]
    pub kind: Option<EntryKind>,
    /// Its path in the VM.
    pub path: String,
    /// Its size in bytes.
    #[serde(deserialize_with = "int64")]
    pub size: u64,
    /// Its modification time, RFC 3339.
    pub modified_time: Option<String>,
    /// Where it points, for a symbolic link.
    pub symlink_target: Option<String>,
}

/// The entries of a `ListDir` answer that were kept, and how many it had.
#[derive(Debug, Default)]
pub(crate) struct Entries {
    /// The first entries, at most the number asked for.
    pub kept: Vec<EntryInfo>,
    /// How many entries the answer had in all.
    pub total: usize,
}

/// Reads a `ListDir` answer (`{"entries": [...]}`, `{}` when empty),
/// building at most `keep` entries. Linear in the body's length.
pub(crate) fn parse_listing(body: &[u8], keep: usize) -> Result<Entries, serde_json::Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Entries::default());
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let entries = Answer { keep }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(entries)
}

/// The answer object: its `entries` read with [`Bounded`], anything else skipped.
struct Answer {
    keep: usize,
}

impl<'de> DeserializeSeed<'de> for Answer {
    type Value = Entries;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entries, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Answer {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a ListDir answer (an object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
        let mut entries = Entries::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "entries" {
                entries = map.next_value_seed(Bounded { keep: self.keep })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(entries)
    }
}

/// The `entries` array: the first `keep` built, the rest counted.
struct Bounded {
    keep: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Entries;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entries, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of entries")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Entries, E> {
        Ok(Entries::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
        let mut entries = Entries::default();
        loop {
            if entries.kept.len() < self.keep {
                match seq.next_element::<EntryInfo>()? {
                    Some(entry) => entries.kept.push(entry),
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            entries.total += 1;
        }
        Ok(entries)
    }
}

/// Reads a proto-JSON enum `FileType`, by name or number.
fn file_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EntryKind>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(match &value {
        serde_json::Value::String(s) => match s.as_str() {
            "FILE_TYPE_FILE" => Some(EntryKind::File),
            "FILE_TYPE_DIRECTORY" => Some(EntryKind::Directory),
            "FILE_TYPE_SYMLINK" => Some(EntryKind::Symlink),
            "FILE_TYPE_UNSPECIFIED" => None,
            _ => Some(EntryKind::Other),
        },
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(1) => Some(EntryKind::File),
            Some(2) => Some(EntryKind::Directory),
            Some(3) => Some(EntryKind::Symlink),
            Some(0) | None => None,
            Some(_) => Some(EntryKind::Other),
        },
        _ => None,
    })
}

/// Reads a proto-JSON 64-bit integer, sent as a string or a number.
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s.trim().parse().map_err(de::Error::custom),
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| de::Error::custom(format!("{n} is not a size"))),
        serde_json::Value::Null => Ok(0),
        other => Err(de::Error::custom(format!("{other} is not a size"))),
    }
}

/// An RFC 3339 time (envd sends nanoseconds) cut to seconds, like local listings.
pub(crate) fn to_seconds(time: &str) -> String {
    match humantime::parse_rfc3339_weak(time.trim_end_matches('Z')) {
        Ok(t) if time.ends_with('Z') => humantime::format_rfc3339_seconds(t).to_string(),
        _ => time.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_read_in_proto_json() {
        let listed = parse_listing(
            br#"{"entries":[{"name":"a.csv","type":"FILE_TYPE_FILE","path":"/home/user/a.csv","size":"8","mode":420,"modifiedTime":"2026-08-21T10:00:00.5Z","future":1},
                {"name":"d","type":2,"path":"/home/user/d","size":4096},
                {"name":"l","type":"FILE_TYPE_FILE","path":"/home/user/l","symlinkTarget":"/home/user/a.csv"}],"later":{"x":[1]}}"#,
            10,
        )
        .unwrap();
        assert_eq!(listed.total, 3);
        let entries = &listed.kept;
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].kind, Some(EntryKind::File));
        assert_eq!(entries[0].size, 8);
        assert_eq!(entries[1].kind, Some(EntryKind::Directory));
        assert_eq!(entries[1].size, 4096);
        assert_eq!(
            to_seconds(entries[0].modified_time.as_deref().unwrap()),
            "2026-08-21T10:00:00Z"
        );
        for empty in [
            &b"{}"[..],
            b"  ",
            b"{\"entries\":null}",
            b"{\"entries\":[]}",
        ] {
            let listed = parse_listing(empty, 10).unwrap();
            assert!(listed.kept.is_empty() && listed.total == 0);
        }
        assert!(parse_listing(b"{\"entries\":[]} trailing", 10).is_err());
        assert!(parse_listing(b"[]", 10).is_err());
    }

    #[test]
    fn only_the_first_entries_are_built_the_rest_are_counted() {
        let mut body = String::from("{\"entries\":[");
        for i in 0..50_000 {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&format!(
                "{{\"name\":\"f{i}\",\"type\":1,\"path\":\"/home/user/f{i}\"}}"
            ));
        }
        body.push_str("]}");
        let listed = parse_listing(body.as_bytes(), 100).unwrap();
        assert_eq!(listed.kept.len(), 100);
        assert_eq!(listed.kept[99].name, "f99");
        assert_eq!(listed.total, 50_000);
        // Empty objects cost nothing past the bound either.
        let tiny = format!("{{\"entries\":[{}{{}}]}}", "{},".repeat(1_000_000));
        let listed = parse_listing(tiny.as_bytes(), 10).unwrap();
        assert_eq!((listed.kept.len(), listed.total), (10, 1_000_001));
    }
}
