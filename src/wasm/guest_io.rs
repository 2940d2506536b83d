//! The host ends of a guest's stdin, stdout and stderr, which carry both the
//! driver protocol (requests in, replies out) and the program's own output.
//!
//! Requests are written into [`GuestLink`]'s inbox and read by the guest as
//! stdin. A reply is one stdout write that starts with the interpreter's secret
//! token; every other byte on stdout or stderr is program output and goes to the
//! [`OutputCapture`] of the execution in progress. While an execution runs, reads
//! of stdin by the program see end-of-file, so user code can never consume the
//! next request.
//!
//! The token only tells the driver's reply apart from ordinary output: it
//! lives in guest memory, so guest code can find it and write a reply of its
//! own. A reply therefore does not end a call. The call ends when the guest
//! reads stdin and finds nothing left, which is the driver waiting for its next
//! request (or code that blocks itself in a read: either way nothing runs), and
//! the call's limits stay armed until then. Asking whether stdin is readable
//! (`select`, `poll`) does not end it: the guest goes on running after such a
//! question. The last reply written before the read is the answer.
//!
//! A runtime driven turn by turn (see [`super::turns`]) ends a call more
//! simply: when its `turn` export returns to the host. Its stdin then holds
//! just the request of the turn, and reads past it see end-of-file.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, oneshot};
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{InputStream, OutputStream, StreamError, StreamResult};

use super::capture::OutputCapture;
use super::cpu_clock::CpuMeter;
use super::protocol::{OutputControl, output_control, without_first_images};
use super::settling::Settling;

/// Length of the per-interpreter token that marks a reply on stdout.
pub(crate) const TOKEN_LEN: usize = 32;
/// Bytes of a reply header: the token and a big-endian u32 length.
const HEADER_LEN: usize = TOKEN_LEN + 4;

/// Which of the guest's output streams a capture belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// A reply from the driver, the fuel left when it was sent and the CPU time
/// its call burned.
pub(crate) struct RawReply {
    /// The reply's body (kind-tagged fields: see [`super::protocol`]).
    pub body: Vec<u8>,
    /// Fuel left as the guest wrote the reply.
    pub fuel_left: u64,
    /// CPU time the call burned, as its end was seen on the guest's thread.
    pub cpu_used: std::time::Duration,
}

/// State shared between the host side of one interpreter and its WASI streams.
pub(crate) struct GuestLink {
    token: [u8; TOKEN_LEN],
    /// Whether calls end when a turn returns rather than at an empty read.
    turns: bool,
    inbox: Mutex<BytesMut>,
    inbox_ready: Notify,
    /// True while an execution runs: program reads of stdin then see EOF.
    executing: AtomicBool,
    stdout: Mutex<StdoutState>,
    stderr: Mutex<OutputCapture>,
    reply: Mutex<Option<oneshot::Sender<RawReply>>>,
    /// The last reply written in the call in progress, handed over once the
    /// guest waits for its next request.
    answer: Mutex<Option<Vec<u8>>>,
    /// Fuel to install when the guest next returns from a host call (0: none).
    pending_fuel: AtomicU64,
    /// Fuel left when the guest last called the host.
    fuel_left: AtomicU64,
    /// The CPU time the guest burns, and its call's budget.
    cpu: Arc<CpuMeter>,
    /// A clear of the call's output the driver asked for.
    clear: Mutex<WaitingClear>,
    /// Work the guest's thread does after an answer.
    settling: Settling,
}

/// A `clear_output(wait=True)` of the call in progress (see
/// [`OutputControl`]).
#[derive(Default)]
struct WaitingClear {
    /// Waiting for output: the images the driver held when it asked.
    waiting: Option<usize>,
    /// Images the reply leaves out: the clear happened at output the host
    /// saw written, before the driver could drop them.
    drop_images: usize,
}

struct StdoutState {
    capture: OutputCapture,
    /// A reply being received: its expected length and the bytes so far.
    reply: Option<(usize, Vec<u8>)>,
    /// Most bytes of a reply kept for the call in progress (a longer one is
    /// cut, and then fails to decode).
    reply_limit: usize,
}

impl GuestLink {
    pub(crate) fn new(token: [u8; TOKEN_LEN], turns: bool) -> Arc<Self> {
        Arc::new(Self {
            token,
            turns,
            inbox: Mutex::new(BytesMut::new()),
            inbox_ready: Notify::new(),
            executing: AtomicBool::new(false),
            stdout: Mutex::new(StdoutState {
                capture: OutputCapture::discard(),
                reply: None,
                reply_limit: 0,
            }),
            stderr: Mutex::new(OutputCapture::discard()),
            reply: Mutex::new(None),
            answer: Mutex::new(None),
            pending_fuel: AtomicU64::new(0),
            fuel_left: AtomicU64::new(0),
            cpu: CpuMeter::new(),
            clear: Mutex::new(WaitingClear::default()),
            settling: Settling::default(),
        })
    }

    /// The guest's CPU meter (its future is measured with it, and its epoch
    /// ticks ask it whether the call's budget is spent).
    pub(crate) fn cpu(&self) -> &Arc<CpuMeter> {
        &self.cpu
    }

    /// The work the guest's thread does after an answer, which the next
    /// call waits for before its time limit starts.
    pub(crate) fn settling(&self) -> &Settling {
        &self.settling
    }

    /// The secret that starts every reply, as text for the hello request.
    pub(crate) fn token_text(&self) -> &str {
        std::str::from_utf8(&self.token).unwrap_or_default()
    }

    /// Sends one request to the driver and returns the receiver of its reply.
    ///
    /// `preamble` is raw bytes put on stdin in front of the request, in the same
    /// write, so that the guest never finds stdin empty between the two (an
    /// empty stdin after a read is end-of-file to it). `fuel` and `cpu` are
    /// the budgets installed when the guest picks the request up (fuel 0 when
    /// it is not metered, cpu `None` when unlimited); the captures receive the
    /// program's output until the call ends; a reply longer than
    /// `reply_limit` bytes is cut.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &self,
        preamble: &[u8],
        request: &[u8],
        fuel: u64,
        cpu: Option<std::time::Duration>,
        reply_limit: usize,
        stdout: OutputCapture,
        stderr: OutputCapture,
    ) -> oneshot::Receiver<RawReply> {
        let (tx, rx) = oneshot::channel();
        {
            let mut out = lock(&self.stdout);
            out.capture = stdout;
            out.reply = None;
            out.reply_limit = reply_limit;
        }
        *lock(&self.stderr) = stderr;
        *lock(&self.clear) = WaitingClear::default();
        *lock(&self.answer) = None;
        *lock(&self.reply) = Some(tx);
        self.pending_fuel.store(fuel, Ordering::SeqCst);
        self.cpu.arm(cpu);
        {
            let mut inbox = lock(&self.inbox);
            inbox.extend_from_slice(preamble);
            let len = u32::try_from(request.len()).unwrap_or(u32::MAX);
            inbox.extend_from_slice(&len.to_be_bytes());
            inbox.extend_from_slice(request);
        }
        self.inbox_ready.notify_one();
        rx
    }

    /// Takes back the output captured since the last [`GuestLink::send`].
    pub(crate) fn take_output(&self) -> (OutputCapture, OutputCapture) {
        let stdout = std::mem::replace(&mut lock(&self.stdout).capture, OutputCapture::discard());
        let stderr = std::mem::replace(&mut *lock(&self.stderr), OutputCapture::discard());
        (stdout, stderr)
    }

    /// Fuel to install now, if a request was just delivered (called from the call hook).
    pub(crate) fn take_pending_fuel(&self) -> Option<u64> {
        match self.pending_fuel.swap(0, Ordering::SeqCst) {
            0 => None,
            fuel => Some(fuel),
        }
    }

    /// Records the fuel left as the guest enters the host (called from the call hook).
    pub(crate) fn record_fuel_left(&self, fuel: u64) {
        self.fuel_left.store(fuel, Ordering::Relaxed);
    }

    fn write(&self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stderr => {
                self.output_written(bytes);
                lock(&self.stderr).push(bytes);
            }
            Stream::Stdout => {
                let mut out = lock(&self.stdout);
                if let Some((expected, mut body)) = out.reply.take() {
                    let wanted = expected - body.len();
                    body.extend_from_slice(&bytes[..wanted.min(bytes.len())]);
                    if body.len() < expected {
                        out.reply = Some((expected, body));
                    } else {
                        drop(out);
                        self.frame_received(body);
                    }
                    return;
                }
                if bytes.len() >= HEADER_LEN && bytes[..TOKEN_LEN] == self.token {
                    let mut len = [0u8; 4];
                    len.copy_from_slice(&bytes[TOKEN_LEN..HEADER_LEN]);
                    let expected = (u32::from_be_bytes(len) as usize).min(out.reply_limit);
                    let body = &bytes[HEADER_LEN..];
                    let body = body[..expected.min(body.len())].to_vec();
                    if body.len() < expected {
                        out.reply = Some((expected, body));
                    } else {
                        drop(out);
                        self.frame_received(body);
                    }
                } else {
                    drop(out);
                    self.output_written(bytes);
                    lock(&self.stdout).capture.push(bytes);
                }
            }
        }
    }

    /// Acts on a complete frame from the driver: an output control (see
    /// [`OutputControl`]), or its reply.
    fn frame_received(&self, body: Vec<u8>) {
        let clear_now = match output_control(&body) {
            None => return self.finish_reply(body),
            Some(OutputControl::ClearNow) => {
                *lock(&self.clear) = WaitingClear::default();
                true
            }
            Some(OutputControl::ClearWhenOutputComes { images }) => {
                lock(&self.clear).waiting = Some(images);
                false
            }
            Some(OutputControl::OutputArrives) => {
                let mut clear = lock(&self.clear);
                clear.drop_images = 0;
                clear.waiting.take().is_some()
            }
        };
        if clear_now {
            self.clear_shown();
        }
    }

    /// The program writes `bytes`: a clear waiting for output happens first,
    /// and the images the driver held when it asked leave the reply.
    fn output_written(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let fired = {
            let mut clear = lock(&self.clear);
            clear
                .waiting
                .take()
                .map(|images| clear.drop_images = images)
        };
        if fired.is_some() {
            self.clear_shown();
        }
    }

    /// Forgets what both streams have shown in the call so far.
    fn clear_shown(&self) {
        lock(&self.stdout).capture.clear_shown();
        lock(&self.stderr).clear_shown();
    }

    /// Keeps a complete reply until the guest waits for its next request
    /// (a later one replaces it). From now on stdin reads wait for data
    /// instead of seeing end-of-file, so the driver can read that request.
    fn finish_reply(&self, body: Vec<u8>) {
        self.executing.store(false, Ordering::SeqCst);
        let cleared = std::mem::take(&mut lock(&self.clear).drop_images);
        let body = if cleared > 0 {
            without_first_images(body, cleared)
        } else {
            body
        };
        *lock(&self.answer) = Some(body);
    }

    /// Waits until a request is on stdin (a turn-driven runtime's next turn).
    pub(crate) async fn wait_request(&self) {
        loop {
            let notified = self.inbox_ready.notified();
            if !lock(&self.inbox).is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// Ends the call in progress as its turn returned with `fuel_left`: the
    /// last reply written is the answer, and a turn that wrote none ends the
    /// call as a lost interpreter would. Whatever the turn left unread on
    /// stdin is dropped.
    pub(crate) fn turn_returned(&self, fuel_left: u64) {
        lock(&self.inbox).clear();
        self.executing.store(false, Ordering::SeqCst);
        let answer = lock(&self.answer).take();
        let reply = lock(&self.reply).take();
        if let (Some(body), Some(tx)) = (answer, reply) {
            let cpu_used = self.cpu.call_used();
            let _ = tx.send(RawReply {
                body,
                fuel_left,
                cpu_used,
            });
        }
    }

    /// Called as the guest reads stdin and finds nothing: with a reply
    /// written, the call is over; the reply goes to the caller with the fuel
    /// left as the guest entered this read.
    fn note_waiting(&self) {
        if self.executing.load(Ordering::SeqCst) || !lock(&self.inbox).is_empty() {
            return;
        }
        let Some(body) = lock(&self.answer).take() else {
            return;
        };
        let fuel_left = self.fuel_left.load(Ordering::Relaxed);
        if let Some(tx) = lock(&self.reply).take() {
            let cpu_used = self.cpu.call_used();
            let _ = tx.send(RawReply {
                body,
                fuel_left,
                cpu_used,
            });
        }
    }

    fn read(&self, size: usize) -> StreamResult<Bytes> {
        if size == 0 {
            // Asks for nothing, and returns at once: not a wait.
            return Ok(Bytes::new());
        }
        let mut inbox = lock(&self.inbox);
        if inbox.is_empty() {
            drop(inbox);
            if self.executing.load(Ordering::SeqCst) || self.turns {
                return Err(StreamError::Closed);
            }
            // Nothing to read: the guest now waits (its read asks again once
            // readable); a call whose reply is written is over.
            self.note_waiting();
            return Ok(Bytes::new());
        }
        self.executing.store(true, Ordering::SeqCst);
        let n = size.min(inbox.len());
        Ok(inbox.split_to(n).freeze())
    }

    /// Waits until stdin has something to say: a request, end-of-file (while
    /// executing), or (with a reply written) the empty read that ends the call.
    async fn wait_readable(&self) {
        loop {
            let notified = self.inbox_ready.notified();
            if self.turns
                || !lock(&self.inbox).is_empty()
                || self.executing.load(Ordering::SeqCst)
                || lock(&self.answer).is_some()
            {
                return;
            }
            notified.await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The guest's stdin: the driver's request channel.
pub(crate) struct GuestStdin(pub(crate) Arc<GuestLink>);

impl IsTerminal for GuestStdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for GuestStdin {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncRead + Send + Sync> {
        Box::new(tokio::io::empty())
    }

    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(StdinReader(self.0.clone()))
    }
}

struct StdinReader(Arc<GuestLink>);

#[async_trait::async_trait]
impl Pollable for StdinReader {
    async fn ready(&mut self) {
        self.0.wait_readable().await;
    }
}

#[async_trait::async_trait]
impl InputStream for StdinReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        self.0.read(size)
    }
}

/// Writes to the guest's stdout or stderr from the host side (the quota
/// gates' shortcut for a program's output).
pub(crate) struct GuestWriter(pub(crate) Arc<GuestLink>, pub(crate) Stream);

impl GuestWriter {
    /// Takes bytes the guest wrote, as one write.
    pub(crate) fn write(&self, bytes: &[u8]) {
        self.0.write(self.1, bytes);
    }
}

/// The guest's stdout or stderr.
pub(crate) struct GuestOutput(pub(crate) Arc<GuestLink>, pub(crate) Stream);

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::sink())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(OutputWriter(self.0.clone(), self.1))
    }
}

struct OutputWriter(Arc<GuestLink>, Stream);

#[async_trait::async_trait]
impl Pollable for OutputWriter {
    async fn ready(&mut self) {}
}

#[async_trait::async_trait]
impl OutputStream for OutputWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.0.write(self.1, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Arc<GuestLink> {
        GuestLink::new([b'k'; TOKEN_LEN], false)
    }

    /// Sends `link` a request whose output is kept in memory; the receiver
    /// of its reply.
    fn sending(link: &GuestLink) -> oneshot::Receiver<RawReply> {
        link.send(
            &[],
            b"x",
            0,
            None,
            1 << 20,
            OutputCapture::memory(100),
            OutputCapture::memory(100),
        )
    }

    /// [`sending`], and the guest reads the request: a call in progress.
    fn executing(link: &GuestLink) -> oneshot::Receiver<RawReply> {
        let rx = sending(link);
        let _ = link.read(100);
        rx
    }

    fn reply_frame(body: &[u8]) -> Vec<u8> {
        let mut frame = vec![b'k'; TOKEN_LEN];
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(body);
        frame
    }

    #[test]
    fn a_reply_split_across_writes_is_reassembled_and_output_is_kept_apart() {
        let link = link();
        let mut rx = executing(&link);
        link.write(Stream::Stdout, b"hello\n");
        let frame = reply_frame(b"{\"value\": null}");
        link.write(Stream::Stdout, &frame[..TOKEN_LEN + 6]);
        assert!(rx.try_recv().is_err(), "reply is not complete yet");
        link.write(Stream::Stdout, &frame[TOKEN_LEN + 6..]);
        assert!(
            rx.try_recv().is_err(),
            "the call ends when the guest reads again"
        );
        assert_eq!(link.read(10).unwrap().len(), 0);
        assert_eq!(rx.try_recv().unwrap().body, b"{\"value\": null}");
        let (stdout, _) = link.take_output();
        assert_eq!(stdout.finish().text, "hello\n");
    }

    #[test]
    fn stdin_reads_see_eof_while_executing_and_requests_are_length_prefixed() {
        let link = link();
        let _rx = link.send(
            &[],
            b"abc",
            7,
            None,
            1 << 20,
            OutputCapture::discard(),
            OutputCapture::discard(),
        );
        let first = link.read(100).unwrap();
        assert_eq!(&first[..], b"\0\0\0\x03abc");
        assert!(matches!(link.read(10), Err(StreamError::Closed)));
        assert_eq!(link.take_pending_fuel(), Some(7));
        assert_eq!(link.take_pending_fuel(), None);
        link.write(Stream::Stdout, &reply_frame(b"{}"));
        assert_eq!(link.take_pending_fuel(), None, "the call's fuel stays");
        assert_eq!(
            link.read(10).unwrap().len(),
            0,
            "idle again: reads wait for data"
        );
    }

    #[test]
    fn output_that_does_not_start_with_the_token_is_program_output() {
        let link = link();
        let _rx = sending(&link);
        link.write(Stream::Stdout, b"kkkk not the token");
        link.write(Stream::Stderr, b"oops");
        let (stdout, stderr) = link.take_output();
        assert_eq!(stdout.finish().text, "kkkk not the token");
        assert_eq!(stderr.finish().text, "oops");
    }

    #[test]
    fn a_clear_frame_clears_both_streams_shown_so_far_and_the_call_goes_on() {
        let link = link();
        let mut rx = executing(&link);
        link.write(Stream::Stdout, b"step 0\n");
        link.write(Stream::Stderr, b"warning 0\n");
        link.write(Stream::Stdout, &reply_frame(b"C\0\0\0\0"));
        link.write(Stream::Stdout, b"step 1\n");
        assert!(
            matches!(link.read(10), Err(StreamError::Closed)),
            "still executing: a clear is not the call's reply"
        );
        assert!(rx.try_recv().is_err());
        link.write(Stream::Stdout, &reply_frame(b"v\0\0\0\x012"));
        assert_eq!(link.read(10).unwrap().len(), 0);
        assert_eq!(rx.try_recv().unwrap().body, b"v\0\0\0\x012");
        let (stdout, stderr) = link.take_output();
        let (stdout, stderr) = (stdout.finish(), stderr.finish());
        assert_eq!(stdout.text, "step 1\n");
        assert_eq!(
            stdout.total_bytes, 7,
            "the stream starts again at the clear"
        );
        assert_eq!(stderr.text, "");
    }

    fn image_field(name: &str) -> Vec<u8> {
        let mut field = vec![b'i'];
        field.extend_from_slice(&(name.len() as u32 + 1).to_be_bytes());
        field.push(b'\n');
        field.extend_from_slice(name.as_bytes());
        field
    }

    /// Runs one call whose guest writes `steps` (program output, or frames
    /// given as reply bodies) and replies with two images; the output and
    /// the reply's images.
    fn call_with(steps: &[(Stream, &[u8], bool)]) -> (String, String, Vec<Vec<u8>>) {
        let link = link();
        let mut rx = executing(&link);
        for (stream, bytes, frame) in steps {
            if *frame {
                link.write(Stream::Stdout, &reply_frame(bytes));
            } else {
                link.write(*stream, bytes);
            }
        }
        link.write(
            Stream::Stdout,
            &reply_frame(&[image_field("one"), image_field("two")].concat()),
        );
        assert_eq!(link.read(10).unwrap().len(), 0);
        let body = rx.try_recv().unwrap().body;
        let images = crate::wasm::protocol::decode_reply(&body)
            .unwrap()
            .images
            .into_iter()
            .map(|i| i.png)
            .collect();
        let (stdout, stderr) = link.take_output();
        (stdout.finish().text, stderr.finish().text, images)
    }

    #[test]
    fn a_waiting_clear_happens_at_the_next_output_whoever_writes_it() {
        use Stream::{Stderr, Stdout};
        // Text written straight to the descriptor sets it off, and the image
        // the driver held when it asked leaves the reply.
        let (out, err, images) = call_with(&[
            (Stdout, b"old\n", false),
            (Stdout, b"W\0\0\0\x011", true),
            (Stderr, b"", false),
            (Stderr, b"new\n", false),
        ]);
        assert_eq!((out.as_str(), err.as_str()), ("", "new\n"));
        assert_eq!(images, [b"two".to_vec()]);
        // The driver saying its image arrives sets it off, once: text after
        // it stays, and the driver's images are its own to drop.
        let (out, _, images) = call_with(&[
            (Stdout, b"old\n", false),
            (Stdout, b"W\0\0\0\x011", true),
            (Stdout, b"A\0\0\0\0", true),
            (Stdout, b"[Image 1]\n", false),
        ]);
        assert_eq!(out, "[Image 1]\n");
        assert_eq!(images.len(), 2);
        // Text that set it off before the driver's word stays.
        let (out, _, images) = call_with(&[
            (Stdout, b"W\0\0\0\x010", true),
            (Stdout, b"after\n", false),
            (Stdout, b"A\0\0\0\0", true),
        ]);
        assert_eq!((out.as_str(), images.len()), ("after\n", 2));
        // Nothing after it: nothing is cleared.
        let (out, _, images) =
            call_with(&[(Stdout, b"kept\n", false), (Stdout, b"W\0\0\0\x012", true)]);
        assert_eq!((out.as_str(), images.len()), ("kept\n", 2));
    }
}

#[cfg(test)]
mod forged_reply_tests {
    use super::*;

    #[test]
    fn the_last_reply_before_the_guest_waits_is_the_answer() {
        let link = GuestLink::new([b'k'; TOKEN_LEN], false);
        let mut rx = link.send(
            &[],
            b"x",
            0,
            None,
            1 << 20,
            OutputCapture::discard(),
            OutputCapture::discard(),
        );
        let _ = link.read(100);
        let frame = |body: &[u8]| {
            let mut f = vec![b'k'; TOKEN_LEN];
            f.extend_from_slice(&(body.len() as u32).to_be_bytes());
            f.extend_from_slice(body);
            f
        };
        link.write(Stream::Stdout, &frame(b"forged"));
        assert!(
            rx.try_recv().is_err(),
            "a reply alone does not end the call"
        );
        link.write(Stream::Stdout, &frame(b"real"));
        assert_eq!(link.read(10).unwrap().len(), 0);
        assert_eq!(rx.try_recv().unwrap().body, b"real");
    }

    #[test]
    fn waiting_with_a_request_unread_does_not_end_the_call() {
        let link = GuestLink::new([b'k'; TOKEN_LEN], false);
        let mut rx = link.send(
            &[],
            b"x",
            0,
            None,
            1 << 20,
            OutputCapture::discard(),
            OutputCapture::discard(),
        );
        let mut frame = vec![b'k'; TOKEN_LEN];
        frame.extend_from_slice(&0u32.to_be_bytes());
        link.write(Stream::Stdout, &frame);
        link.note_waiting();
        assert!(rx.try_recv().is_err(), "the request is still in the inbox");

        // Asking whether stdin is readable does not end a call.
        let link = GuestLink::new([b'k'; TOKEN_LEN], false);
        let mut rx = link.send(
            &[],
            b"x",
            0,
            None,
            1 << 20,
            OutputCapture::discard(),
            OutputCapture::discard(),
        );
        let _ = link.read(100);
        let mut frame = vec![b'k'; TOKEN_LEN];
        frame.extend_from_slice(&0u32.to_be_bytes());
        link.write(Stream::Stdout, &frame);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(link.wait_readable());
        assert!(rx.try_recv().is_err(), "a readiness question is not a read");
        assert_eq!(link.read(10).unwrap().len(), 0);
        assert!(rx.try_recv().is_ok(), "the empty read ends it");
    }
}
