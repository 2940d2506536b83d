//! [`Collected`]: what an execution's stream said, kept within the limits
//! the local backend applies: the output streams through [`Capture`], the
//! value and an exception's text and traceback cut at the output limit with
//! [`cap_value_text`] and [`cap_exec_error`], and at most `max_images`
//! images of at most `image_bytes` each (one per result: PNG, else JPEG,
//! else SVG). A result that is only HTML or markdown (its plain text just
//! names the object) comes back as that text.
//! What is left out is said in a note on stderr, as the local backend does.

use base64::Engine as _;

use super::jupyter::{Line, RichResult};
use super::output::Capture;
use crate::sandbox::{ExecError, ExecImage, cap_exec_error, cap_value_text, human_bytes};

/// The limits a collection keeps to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResultLimits {
    /// Most bytes of the value and of each part of an exception.
    pub text_bytes: usize,
    /// Most bytes of one image (decoded).
    pub image_bytes: usize,
    /// Most images kept.
    pub max_images: usize,
    /// The stream's line limit, for the note on a skipped line.
    pub line_bytes: usize,
}

/// Everything an execution's stream said, bounded.
pub(crate) struct Collected {
    /// Standard output (displayed values included).
    pub stdout: Capture,
    /// Standard error (notes included, once [`Collected::note_left_out`] ran).
    pub stderr: Capture,
    /// The value of the final expression, cut.
    pub value: Option<String>,
    /// The exception raised, cut.
    pub error: Option<ExecError>,
    /// The images kept.
    pub images: Vec<ExecImage>,
    limits: ResultLimits,
    left_out: LeftOut,
}

/// What was not kept, for the notes.
#[derive(Debug, Default)]
struct LeftOut {
    /// Images past the count limit.
    over_count: usize,
    /// Images over the size limit, and the largest one's size.
    over_size: (usize, u64),
    /// Images whose data is not base64.
    unreadable: usize,
    /// Lines skipped for their length: how many and the longest.
    skipped: (usize, u64),
}

/// Why an image was not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Over the size limit; about this many bytes.
    TooLarge(u64),
    /// Not base64.
    Unreadable,
}

impl Collected {
    /// An empty collection into these captures, under `limits`.
    pub(crate) fn new(stdout: Capture, stderr: Capture, limits: ResultLimits) -> Self {
        Self {
            stdout,
            stderr,
            value: None,
            error: None,
            images: Vec::new(),
            limits,
            left_out: LeftOut::default(),
        }
    }

    /// Takes one line of the stream.
    pub(crate) fn take(&mut self, line: Line) {
        match line {
            Line::Stdout { text } => self.stdout.push(&text),
            Line::Stderr { text } => self.stderr.push(&text),
            Line::Error {
                name,
                value,
                traceback,
            } => {
                let error = ExecError {
                    name,
                    value,
                    traceback,
                };
                self.error = Some(cap_exec_error(error, self.limits.text_bytes));
            }
            Line::Result(result) => self.take_result(result),
            Line::Skipped { bytes, kind } => self.take_skipped(bytes, kind.as_deref()),
            Line::NumberOfExecutions {}
            | Line::Keepalive
            | Line::EndOfExecution
            | Line::Unknown => {}
        }
    }

    fn take_result(&mut self, mut result: RichResult) {
        result.text = text_of(&result);
        let has_image = result.png.is_some() || result.jpeg.is_some() || result.svg.is_some();
        if has_image {
            if self.images.len() >= self.limits.max_images {
                self.left_out.over_count += 1;
            } else {
                match pick_image(&result, self.limits.image_bytes) {
                    Ok(image) => self.images.push(image),
                    Err(Refusal::TooLarge(size)) => {
                        let (count, largest) = &mut self.left_out.over_size;
                        *count += 1;
                        *largest = (*largest).max(size);
                    }
                    Err(Refusal::Unreadable) => self.left_out.unreadable += 1,
                }
            }
        }
        if result.is_main_result {
            self.value = result
                .text
                .map(|t| cap_value_text(t, self.limits.text_bytes));
        } else if !has_image && let Some(text) = result.text {
            // A displayed value shows where a notebook would show it.
            self.stdout.push(&text);
            self.stdout.push("\n");
        }
    }

    fn take_skipped(&mut self, bytes: u64, kind: Option<&str>) {
        let (count, longest) = &mut self.left_out.skipped;
        *count += 1;
        *longest = (*longest).max(bytes);
        if kind == Some("error") && self.error.is_none() {
            self.error = Some(ExecError {
                name: "UnreadableException".into(),
                value: format!(
                    "the code raised an exception whose report from E2B is {}, over the {} a line of its answer may have; it was not read",
                    human_bytes(bytes),
                    human_bytes(self.limits.line_bytes as u64)
                ),
                traceback: String::new(),
            });
        }
    }

    /// Writes a note on stderr for each kind of thing left out.
    pub(crate) fn note_left_out(&mut self) {
        let left = std::mem::take(&mut self.left_out);
        let images = |n: usize| {
            if n == 1 {
                "1 image".to_owned()
            } else {
                format!("{n} images")
            }
        };
        let mut notes = Vec::new();
        if left.over_count > 0 {
            notes.push(format!(
                "{} not returned: at most {} images per execution (SANDBOX_MAX_IMAGES); save figures to files to keep more",
                images(left.over_count),
                self.limits.max_images
            ));
        }
        if left.over_size.0 > 0 {
            notes.push(format!(
                "{} not returned: over the image limit of {} (SANDBOX_IMAGE_LIMIT_BYTES), the largest about {}; draw smaller figures (fewer dots per inch) or save them to files",
                images(left.over_size.0),
                human_bytes(self.limits.image_bytes as u64),
                human_bytes(left.over_size.1)
            ));
        }
        if left.unreadable > 0 {
            notes.push(format!(
                "{} not returned: E2B sent data that is not base64",
                images(left.unreadable)
            ));
        }
        if left.skipped.0 > 0 {
            notes.push(format!(
                "skipped a line of E2B's answer ({} in all, the longest {}): lines over {} are not read, so an image, value or text that large is not returned",
                left.skipped.0,
                human_bytes(left.skipped.1),
                human_bytes(self.limits.line_bytes as u64)
            ));
        }
        for note in notes {
            self.stderr.push(&format!("[{note}]\n"));
        }
    }
}

/// The text a result is shown as: its plain text, unless that only names
/// the object (`<IPython.core.display.HTML object>`) and the result has
/// markdown or HTML, which then stands in for it.
fn text_of(result: &RichResult) -> Option<String> {
    let placeholder = |t: &str| {
        let t = t.trim();
        t.starts_with('<') && t.ends_with(" object>") && !t.contains('\n')
    };
    match &result.text {
        Some(text) if !placeholder(text) => Some(text.clone()),
        text => result
            .markdown
            .clone()
            .or_else(|| result.html.clone())
            .or_else(|| text.clone()),
    }
}

/// The image of a result: its PNG, else its JPEG (a figure comes in both;
/// it is returned once), else its SVG, when one is readable and within
/// `limit` bytes.
fn pick_image(result: &RichResult, limit: usize) -> Result<ExecImage, Refusal> {
    let mut refusal = Refusal::Unreadable;
    let svg = result
        .svg
        .as_ref()
        .map(|svg| base64::engine::general_purpose::STANDARD.encode(svg));
    for (mime, data) in [
        ("image/png", &result.png),
        ("image/jpeg", &result.jpeg),
        ("image/svg+xml", &svg),
    ] {
        let Some(data) = data else { continue };
        match checked_base64(data, limit) {
            Ok(data_base64) => {
                return Ok(ExecImage {
                    mime_type: mime.to_owned(),
                    data_base64,
                    path: None,
                });
            }
            Err(r @ Refusal::TooLarge(_)) => refusal = r,
            Err(Refusal::Unreadable) => {}
        }
    }
    Err(refusal)
}

/// The base64 `data` without whitespace, when it decodes to at most `limit`
/// bytes. Data far over the limit is refused by its length alone, unread.
fn checked_base64(data: &str, limit: usize) -> Result<String, Refusal> {
    let encoded_limit = limit.div_ceil(3).saturating_mul(4);
    let approximate = |encoded: usize| encoded as u64 / 4 * 3;
    if data.len() > encoded_limit.saturating_mul(2).saturating_add(1024) {
        return Err(Refusal::TooLarge(approximate(data.len())));
    }
    let compact: String = data.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() > encoded_limit {
        return Err(Refusal::TooLarge(approximate(compact.len())));
    }
    match base64::engine::general_purpose::STANDARD.decode(compact.as_bytes()) {
        Ok(bytes) if bytes.len() <= limit => Ok(compact),
        Ok(bytes) => Err(Refusal::TooLarge(bytes.len() as u64)),
        Err(_) => Err(Refusal::Unreadable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    fn collected(max_images: usize) -> Collected {
        Collected::new(
            Capture::new(1 << 20, 0),
            Capture::new(1 << 20, 0),
            ResultLimits {
                text_bytes: 100,
                image_bytes: 1000,
                max_images,
                line_bytes: 8 << 20,
            },
        )
    }

    fn figure(png: Option<String>, jpeg: Option<String>) -> Line {
        Line::Result(RichResult {
            text: Some("<Figure>".into()),
            png,
            jpeg,
            is_main_result: false,
            ..RichResult::default()
        })
    }

    fn stderr(mut c: Collected) -> String {
        c.note_left_out();
        c.stderr.finish(None).text
    }

    #[test]
    fn images_past_the_count_are_left_out_and_said() {
        let mut c = collected(3);
        for _ in 0..30 {
            c.take(figure(Some(PNG.into()), None));
        }
        assert_eq!(c.images.len(), 3);
        let note = stderr(c);
        assert!(note.contains("27 images not returned: at most 3"), "{note}");
    }

    #[test]
    fn images_over_the_size_are_left_out_unread_and_said() {
        let mut c = collected(8);
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 1001]);
        let huge = "A".repeat(10 << 20);
        c.take(figure(Some(big), None));
        c.take(figure(Some(huge), None));
        c.take(figure(Some("not base64!".into()), None));
        assert!(c.images.is_empty());
        c.note_left_out();
        let out = c.stdout.finish(None);
        assert_eq!(out.text, "", "a figure's text is not printed");
        let note = c.stderr.finish(None).text;
        assert!(
            note.contains("2 images not returned: over the image limit of 1000 bytes"),
            "{note}"
        );
        assert!(note.contains("the largest about 7.5 MiB"), "{note}");
        assert!(
            note.contains("1 image not returned: E2B sent data that is not base64"),
            "{note}"
        );
    }

    #[test]
    fn a_figure_in_png_and_jpeg_is_returned_once() {
        let mut c = collected(8);
        c.take(figure(Some(PNG.into()), Some(PNG.into())));
        assert_eq!(c.images.len(), 1);
        assert_eq!(c.images[0].mime_type, "image/png");
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 5000]);
        c.take(figure(
            Some(big),
            Some(format!("{}\n{}", &PNG[..40], &PNG[40..])),
        ));
        assert_eq!(c.images.len(), 2, "the JPEG stands in for a PNG too large");
        assert_eq!(c.images[1].mime_type, "image/jpeg");
        assert_eq!(c.images[1].data_base64, PNG);
    }

    #[test]
    fn an_exception_is_cut_like_a_value_and_a_skipped_error_is_still_an_error() {
        let mut c = collected(8);
        c.take(Line::Error {
            name: "N".repeat(300),
            value: "v".repeat(5000),
            traceback: "line\n".repeat(5000),
        });
        let error = c.error.clone().unwrap();
        assert!(error.name.len() < 300, "{}", error.name);
        for part in [&error.name, &error.value, &error.traceback] {
            assert!(part.contains("left out"), "{part}");
        }
        assert!(error.value.len() < 200, "{}", error.value);
        assert!(error.traceback.len() < 200, "{}", error.traceback);
        let mut c = collected(8);
        c.take(Line::Skipped {
            bytes: 9 << 20,
            kind: Some("error".into()),
        });
        assert_eq!(c.error.as_ref().unwrap().name, "UnreadableException");
        let note = stderr(c);
        assert!(
            note.contains(
                "skipped a line of E2B's answer (1 in all, the longest 9 MiB): lines over 8 MiB"
            ),
            "{note}"
        );
    }
}
