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
        /// Whether the reply should carry the driver's compiled code.
        want_program: bool,
    },
    /// Run a cell.
    Exec {
        /// File name shown in tracebacks, e.g. `<cell-3>`.
        filename: &'a str,
        /// The code.
        code: &'a str,
        /// Most bytes of one image returned (larger ones are downscaled).
        image_bytes: usize,
        /// Most images returned.
        max_images: usize,
        /// Guest path prefix of the figures saved full size, e.g. `/.outputs/exec-3`.
        figure_prefix: &'a str,
        /// Most bytes of the value, the exception message and the traceback
        /// each (longer ones lose their middle).
        text_limit: usize,
    },
    /// Make newly installed packages importable.
    RefreshPackages,
    /// Import these modules ahead of any code, binding no name.
    Preload {
        /// Module names, e.g. `matplotlib.pyplot`.
        modules: &'a [String],
    },
}

impl Request<'_> {
    /// The request's bytes (without the outer length, which the link adds).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let numbers;
        let (op, fields): (u8, Vec<&[u8]>) = match self {
            Self::Hello {
                token,
                site_packages,
                want_program,
            } => {
                let want: &[u8] = if *want_program { b"1" } else { b"" };
                (b'H', vec![token.as_bytes(), site_packages.as_bytes(), want])
            }
            Self::Exec {
                filename,
                code,
                image_bytes,
                max_images,
                figure_prefix,
                text_limit,
            } => {
                numbers = [
                    image_bytes.to_string(),
                    max_images.to_string(),
                    text_limit.to_string(),
                ];
                (
                    b'E',
                    vec![
                        filename.as_bytes(),
                        code.as_bytes(),
                        numbers[0].as_bytes(),
                        numbers[1].as_bytes(),
                        figure_prefix.as_bytes(),
                        numbers[2].as_bytes(),
                    ],
                )
            }
            Self::RefreshPackages => (b'R', vec![]),
            Self::Preload { modules } => (b'P', modules.iter().map(|m| m.as_bytes()).collect()),
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

/// What a frame the driver writes in the middle of a call asks of the host
/// about the output the call has shown (IPython's `clear_output()`). Such a
/// frame has a reply's form, one field whose kind is a capital letter no
/// reply uses: `C` (empty), `W` (a count, in ASCII digits) or `A` (empty).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OutputControl {
    /// `C`: clear what the call has shown so far, now.
    ClearNow,
    /// `W`: clear it when the program next writes output; the driver then
    /// held `images` images, which the reply leaves out if the clear happens
    /// before the driver says [`OutputControl::OutputArrives`].
    ClearWhenOutputComes {
        /// Images the driver held when it asked.
        images: usize,
    },
    /// `A`: the call shows something the host does not see written (an
    /// image, its value or error), so a waiting clear happens now; the
    /// driver has dropped its images itself.
    OutputArrives,
}

/// The output control a frame's `body` is, if it is one (else it is a
/// reply).
pub(crate) fn output_control(body: &[u8]) -> Option<OutputControl> {
    let mut fields = Fields::of(body);
    let field = fields.next()?.ok()?;
    if fields.next().is_some() {
        return None;
    }
    match (field.kind, field.value) {
        (b'C', []) => Some(OutputControl::ClearNow),
        (b'A', []) => Some(OutputControl::OutputArrives),
        (b'W', digits) => std::str::from_utf8(digits)
            .ok()?
            .parse()
            .ok()
            .map(|images| OutputControl::ClearWhenOutputComes { images }),
        _ => None,
    }
}

/// A reply `body` without its first `count` images (shown before a clear
/// the host made alone); the other fields as they were. A body that cannot
/// be read is left as it is (its decoding says why).
pub(crate) fn without_first_images(body: Vec<u8>, count: usize) -> Vec<u8> {
    let Ok(fields) = Fields::of(&body).collect::<Result<Vec<_>, _>>() else {
        return body;
    };
    let mut out = Vec::with_capacity(body.len());
    let mut dropped = 0;
    for field in fields {
        if field.kind == b'i' && dropped < count {
            dropped += 1;
        } else {
            out.extend_from_slice(field.whole);
        }
    }
    out
}

/// One field of a reply (or of an output control): its kind, its value,
/// and its bytes as written, header and all.
struct Field<'a> {
    kind: u8,
    value: &'a [u8],
    whole: &'a [u8],
}

/// The fields of a reply body, in order; a body cut inside a field ends
/// with the error that says where.
struct Fields<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn of(body: &'a [u8]) -> Self {
        Self { body, at: 0 }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, ReplyError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (body, at) = (self.body, self.at);
        if at >= body.len() {
            return None;
        }
        // Nothing after an error: the body is read no further.
        self.at = body.len();
        let Some(header) = body.get(at..at + 5) else {
            return Some(Err(ReplyError::HeaderCut(at)));
        };
        let kind = header[0];
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let Some(end) = (at + 5).checked_add(len).filter(|&e| e <= body.len()) else {
            return Some(Err(ReplyError::FieldCut(kind as char)));
        };
        self.at = end;
        Some(Ok(Field {
            kind,
            value: &body[at + 5..end],
            whole: &body[at..end],
        }))
    }
}

/// What the driver answered.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The cell's trailing expression, as a notebook shows it.
    pub value: Option<String>,
    /// The exception the cell raised.
    pub error: Option<ExecError>,
    /// The images the cell produced, in order.
    pub images: Vec<ReplyImage>,
    /// The driver's compiled code (marshal), when the hello asked for it.
    pub program: Option<Vec<u8>>,
}

/// One image of a reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ReplyImage {
    /// The image's bytes: PNG (figures), or PNG, JPEG or SVG displayed with
    /// IPython.display (the host types it by its first bytes).
    pub png: Vec<u8>,
    /// Guest path of the full-size file, when the image was downscaled.
    pub full_size_path: Option<String>,
}

/// Why a reply body could not be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The body ends inside a field's kind and length.
    #[error("a field header is cut at byte {0}")]
    HeaderCut(usize),
    /// A field's length runs past the end of the body.
    #[error("field '{0}' runs past the end of the reply")]
    FieldCut(char),
    /// An image field lacks the line naming its full-size file.
    #[error("an image field has no path line")]
    ImageWithoutPath,
}

/// Decodes a reply body.
pub(crate) fn decode_reply(body: &[u8]) -> Result<Reply, ReplyError> {
    let mut reply = Reply::default();
    let (mut name, mut message, mut traceback) = (None, None, None);
    for field in Fields::of(body) {
        let Field { kind, value, .. } = field?;
        if kind == b'i' {
            let newline = value
                .iter()
                .position(|&b| b == b'\n')
                .ok_or(ReplyError::ImageWithoutPath)?;
            let path = String::from_utf8_lossy(&value[..newline]).into_owned();
            reply.images.push(ReplyImage {
                png: value[newline + 1..].to_vec(),
                full_size_path: (!path.is_empty()).then_some(path),
            });
            continue;
        }
        if kind == b'c' {
            reply.program = Some(value.to_vec());
            continue;
        }
        let text = String::from_utf8_lossy(value).into_owned();
        match kind {
            b'v' => reply.value = Some(text),
            b'n' => name = Some(text),
            b'm' => message = Some(text),
            b't' => traceback = Some(text),
            _ => {}
        }
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
    fn output_controls_are_told_from_replies_and_a_cleared_reply_loses_its_first_images() {
        assert_eq!(
            output_control(&field(b'C', "")),
            Some(OutputControl::ClearNow)
        );
        assert_eq!(
            output_control(&field(b'W', "3")),
            Some(OutputControl::ClearWhenOutputComes { images: 3 })
        );
        assert_eq!(
            output_control(&field(b'A', "")),
            Some(OutputControl::OutputArrives)
        );
        for reply in [
            field(b'v', "1"),
            [field(b'C', ""), field(b'v', "1")].concat(),
            field(b'W', "x"),
            field(b'C', "x"),
            vec![],
        ] {
            assert_eq!(output_control(&reply), None, "{reply:?}");
        }
        let reply = [
            field(b'v', "2"),
            field(b'i', "\nfirst"),
            field(b'i', "\nsecond"),
            field(b'i', "\nthird"),
        ]
        .concat();
        let decoded = decode_reply(&without_first_images(reply, 2)).unwrap();
        assert_eq!(decoded.value.as_deref(), Some("2"));
        assert_eq!(decoded.images.len(), 1);
        assert_eq!(decoded.images[0].png, b"third");
    }

    #[test]
    fn requests_are_an_op_and_length_prefixed_fields() {
        let bytes = Request::Exec {
            filename: "<cell-1>",
            code: "1+1",
            image_bytes: 4096,
            max_images: 8,
            figure_prefix: "/o/e1",
            text_limit: 65536,
        }
        .encode();
        assert_eq!(
            bytes,
            b"E\0\0\0\x08<cell-1>\0\0\0\x031+1\0\0\0\x044096\0\0\0\x018\0\0\0\x05/o/e1\0\0\0\x0565536"
        );
        assert_eq!(Request::RefreshPackages.encode(), b"R");
        let hello = |want_program| {
            Request::Hello {
                token: "t",
                site_packages: "/sp",
                want_program,
            }
            .encode()
        };
        assert_eq!(hello(true), b"H\0\0\0\x01t\0\0\0\x03/sp\0\0\0\x011");
        assert_eq!(hello(false), b"H\0\0\0\x01t\0\0\0\x03/sp\0\0\0\0");
    }

    #[test]
    fn a_ready_reply_may_carry_the_drivers_compiled_code_as_bytes() {
        let code = [0xe3, 0x00, 0xff, b'\n'];
        let mut body = field(b'r', "ready");
        body.push(b'c');
        body.extend_from_slice(&(code.len() as u32).to_be_bytes());
        body.extend_from_slice(&code);
        let reply = decode_reply(&body).unwrap();
        assert_eq!(reply.program.as_deref(), Some(&code[..]));
        assert_eq!(decode_reply(&field(b'r', "ready")).unwrap().program, None);
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
    fn images_carry_png_bytes_and_the_path_of_their_full_size_file() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        let mut body = vec![b'i'];
        body.extend_from_slice(&((1 + png.len()) as u32).to_be_bytes());
        body.push(b'\n');
        body.extend_from_slice(png);
        let saved = [b"/.outputs/exec-1-figure-2.png\n".as_slice(), png].concat();
        body.push(b'i');
        body.extend_from_slice(&(saved.len() as u32).to_be_bytes());
        body.extend_from_slice(&saved);
        body.extend_from_slice(&field(b'v', "<Figure>"));
        let reply = decode_reply(&body).unwrap();
        assert_eq!(reply.value.as_deref(), Some("<Figure>"));
        assert_eq!(reply.images.len(), 2);
        assert_eq!(reply.images[0].png, png);
        assert_eq!(reply.images[0].full_size_path, None);
        assert_eq!(
            reply.images[1].full_size_path.as_deref(),
            Some("/.outputs/exec-1-figure-2.png")
        );
        assert_eq!(
            decode_reply(&[b'i', 0, 0, 0, 3, b'a', b'b', b'c']),
            Err(ReplyError::ImageWithoutPath)
        );
    }

    #[test]
    fn truncated_replies_are_errors_not_panics() {
        assert_eq!(decode_reply(b"v\0\0"), Err(ReplyError::HeaderCut(0)));
        assert_eq!(
            decode_reply(b"v\0\0\0\x09abc"),
            Err(ReplyError::FieldCut('v'))
        );
        assert_eq!(
            decode_reply(b"v\xff\xff\xff\xffabc"),
            Err(ReplyError::FieldCut('v'))
        );
    }
}
