//! The messages between the host and the driver (`driver.py`): requests as an
//! op byte and length-prefixed fields; replies as kind-tagged, length-prefixed
//! fields. No JSON: the driver must start fast, and a JSON parser costs CPython
//! on WASI tens of milliseconds to import.

use crate::sandbox::ExecError;

/// A request to the driver.
pub(crate) enum Request<'a> {
    /// The first request: the reply token and the site-packages directory.
    Hello {
        /// Token that starts every reply.
        token: &'a str,
        /// Guest path of site-packages.
        site_packages: &'a str,
    },
    /// Run a cell.
    Exec {
        /// File name shown in tracebacks, e.g. `<cell-3>`.
        filename: &'a str,
        /// The code.
        code: &'a str,
    },
    /// Make newly installed packages importable.
    RefreshPackages,
}

impl Request<'_> {
    /// The request's bytes (without the outer length, which the link adds).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (op, fields): (u8, Vec<&[u8]>) = match self {
            Self::Hello {
                token,
                site_packages,
            } => (b'H', vec![token.as_bytes(), site_packages.as_bytes()]),
            Self::Exec { filename, code } => (b'E', vec![filename.as_bytes(), code.as_bytes()]),
            Self::RefreshPackages => (b'R', vec![]),
        };
        let mut out = Vec::with_capacity(1 + fields.iter().map(|f| f.len() + 4).sum::<usize>());
        out.push(op);
        for field in fields {
            out.extend_from_slice(&(field.len() as u32).to_be_bytes());
            out.extend_from_slice(field);
        }
        out
    }
}

/// What the driver answered.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reply {
    /// `repr()` of the cell's trailing expression.
    pub value: Option<String>,
    /// The exception the cell raised.
    pub error: Option<ExecError>,
}

/// Decodes a reply body.
pub(crate) fn decode_reply(body: &[u8]) -> Result<Reply, String> {
    let mut reply = Reply::default();
    let (mut name, mut message, mut traceback) = (None, None, None);
    let mut at = 0;
    while at < body.len() {
        if at + 5 > body.len() {
            return Err(format!("a field header is cut at byte {at}"));
        }
        let kind = body[at];
        let len =
            u32::from_be_bytes([body[at + 1], body[at + 2], body[at + 3], body[at + 4]]) as usize;
        let start = at + 5;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= body.len())
            .ok_or_else(|| format!("field '{}' runs past the end of the reply", kind as char))?;
        let text = String::from_utf8_lossy(&body[start..end]).into_owned();
        match kind {
            b'v' => reply.value = Some(text),
            b'n' => name = Some(text),
            b'm' => message = Some(text),
            b't' => traceback = Some(text),
            _ => {}
        }
        at = end;
    }
    if let Some(name) = name {
        reply.error = Some(ExecError {
            name,
            value: message.unwrap_or_default(),
            traceback: traceback.unwrap_or_default(),
        });
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(kind: u8, value: &str) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
        out
    }

    #[test]
    fn requests_are_an_op_and_length_prefixed_fields() {
        let bytes = Request::Exec {
            filename: "<cell-1>",
            code: "1+1",
        }
        .encode();
        assert_eq!(bytes, b"E\0\0\0\x08<cell-1>\0\0\0\x031+1");
        assert_eq!(Request::RefreshPackages.encode(), b"R");
    }

    #[test]
    fn replies_decode_values_and_errors() {
        let body = [field(b'v', "42")].concat();
        assert_eq!(decode_reply(&body).unwrap().value.as_deref(), Some("42"));
        let body = [
            field(b'n', "ZeroDivisionError"),
            field(b'm', "division by zero"),
            field(b't', "Traceback..."),
            field(b'x', "ignored"),
        ]
        .concat();
        let error = decode_reply(&body).unwrap().error.unwrap();
        assert_eq!(error.name, "ZeroDivisionError");
        assert_eq!(error.value, "division by zero");
        assert_eq!(decode_reply(b"").unwrap(), Reply::default());
    }

    #[test]
    fn truncated_replies_are_errors_not_panics() {
        assert!(decode_reply(b"v\0\0").is_err());
        assert!(decode_reply(b"v\0\0\0\x09abc").is_err());
        assert!(decode_reply(b"v\xff\xff\xff\xffabc").is_err());
    }
}
