//! Values that cross the interpreter trait: limits, execution results, file
//! listings and status. They serialize to the structured output of the tools.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

pub use super::door_usage::{DoorUsage, RequestRecord, ToolCallRecord};
use super::error::SandboxError;

/// The limits one execution runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecLimits {
    /// Wall-clock time the execution may take.
    pub timeout: Duration,
    /// Fuel (roughly, WebAssembly instructions) the execution may burn; `None`
    /// when fuel is not metered.
    pub fuel: Option<u64>,
    /// CPU time the execution may burn, on the clock of the thread running
    /// it; `None`: only the wall-clock timeout bounds it.
    pub cpu: Option<Duration>,
    /// Bytes of each output stream returned inline.
    pub output_bytes: usize,
    /// Bytes of each output stream kept in a file in the sandbox when the
    /// inline part overflows.
    pub output_file_bytes: u64,
    /// Most bytes of one returned image (a larger plot is downscaled).
    pub image_bytes: usize,
    /// Most images returned by one execution.
    pub max_images: usize,
}

/// The resource limits of one sandbox, fixed when it is created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Default wall-clock timeout of an execution.
    pub timeout: Duration,
    /// Largest timeout an execution may ask for.
    pub max_timeout: Duration,
    /// Linear memory the interpreter may grow to, in bytes.
    pub memory_bytes: u64,
    /// Fuel per execution, when metered.
    pub fuel: Option<u64>,
    /// CPU time per execution (`None`: bounded by its timeout only).
    pub cpu: Option<Duration>,
    /// Inline output per stream, in bytes.
    pub output_bytes: usize,
    /// Output per stream kept in a file, in bytes.
    pub output_file_bytes: u64,
    /// Bytes the sandbox directory may hold.
    pub disk_bytes: u64,
    /// Files and directories the sandbox directory may hold.
    pub disk_files: u64,
    /// Most bytes of one returned image.
    pub image_bytes: usize,
    /// Most images returned by one execution.
    pub max_images: usize,
    /// Most files and directories the interpreter may hold open at once.
    pub open_files: u64,
}

impl SandboxLimits {
    /// The limits of one execution that asked for `timeout`; a timeout over
    /// the maximum is refused (the same rule as at creation).
    pub fn for_execution(&self, timeout: Option<Duration>) -> Result<ExecLimits, SandboxError> {
        let timeout = match timeout {
            Some(asked) => self.check_timeout(asked)?,
            None => self.timeout,
        };
        Ok(ExecLimits {
            timeout,
            fuel: self.fuel,
            cpu: self.cpu,
            output_bytes: self.output_bytes,
            output_file_bytes: self.output_file_bytes,
            image_bytes: self.image_bytes,
            max_images: self.max_images,
        })
    }

    /// `asked`, if it is within the maximum timeout.
    pub fn check_timeout(&self, asked: Duration) -> Result<Duration, SandboxError> {
        if asked > self.max_timeout {
            return Err(SandboxError::InvalidArgument(format!(
                "timeout_seconds {} is over this server's maximum of {} (SANDBOX_MAX_TIMEOUT_SECONDS); ask for {} or less",
                asked.as_secs_f64(),
                self.max_timeout.as_secs_f64(),
                self.max_timeout.as_secs_f64()
            )));
        }
        Ok(asked)
    }
}

/// What a backend needs to create a sandbox.
#[derive(Clone, Debug)]
pub struct SandboxSpec {
    /// The sandbox's id (already validated).
    pub id: String,
    /// Its limits.
    pub limits: SandboxLimits,
    /// The runtime to run, by name (`None`: the backend's default).
    pub runtime: Option<String>,
    /// Where to say what a slow creation is doing (e.g. a runtime compiling
    /// on its first use).
    pub progress: Option<Progress>,
    /// The destinations its guest's HTTP may reach, narrowing the server's
    /// `SANDBOX_ALLOW_HOSTS` (`None`: the server's list).
    pub allow_hosts: Option<Vec<String>>,
    /// Closed after one execution: its state need not be kept on disk.
    pub one_off: bool,
}

/// Receives progress messages of a slow operation, as they happen.
#[derive(Clone)]
pub struct Progress(std::sync::Arc<dyn Fn(String) + Send + Sync>);

impl Progress {
    /// Progress messages go to `report`.
    pub fn new(report: impl Fn(String) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(report))
    }

    /// Reports one message.
    pub fn report(&self, message: String) {
        (self.0)(message);
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// One of the two output streams of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Receives an execution's output while it is produced (the same bytes the
/// result's streams are made of). Called on the path the guest writes
/// through: it must only take the bytes and return.
#[derive(Clone)]
pub struct OutputTap(std::sync::Arc<TapFn>);

/// What an [`OutputTap`] calls with each write.
type TapFn = dyn Fn(OutputStream, &[u8]) + Send + Sync;

impl OutputTap {
    /// Output goes to `take` as it is written.
    pub fn new(take: impl Fn(OutputStream, &[u8]) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(take))
    }

    /// Hands over bytes written to `stream`.
    pub fn write(&self, stream: OutputStream, bytes: &[u8]) {
        (self.0)(stream, bytes);
    }
}

impl std::fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputTap(..)")
    }
}

/// One request to run code.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    /// Python source.
    pub code: String,
    /// Limits for this execution.
    pub limits: ExecLimits,
    /// Where output goes while it is produced, besides the result.
    pub output: Option<OutputTap>,
}

/// Captured text of one output stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct CapturedText {
    /// The text, possibly cut at the inline limit.
    pub text: String,
    /// Bytes the program wrote to the stream in all.
    pub total_bytes: u64,
    /// Whether `text` is cut short.
    pub truncated: bool,
    /// Guest path of a file holding the whole stream (up to the file limit)
    /// when `text` is cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_output_path: Option<String>,
    /// Bytes of the stream in that file: fewer than `total_bytes` when the
    /// file limit or the disk quota stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_bytes: Option<u64>,
}

/// An exception raised by the user's code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
pub struct ExecError {
    /// Exception class, e.g. `ZeroDivisionError`.
    pub name: String,
    /// Its message.
    pub value: String,
    /// The formatted traceback.
    pub traceback: String,
}

/// Which limit an execution hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// The wall-clock timeout.
    Timeout,
    /// The fuel budget.
    Fuel,
    /// The CPU-time budget.
    Cpu,
    /// The memory cap.
    Memory,
    /// The WebAssembly stack.
    Stack,
    /// The inline output cap.
    Output,
    /// The disk quota.
    Disk,
    /// The number of files open at once.
    OpenFiles,
}

/// A limit that an execution ran into.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LimitHit {
    /// Which limit.
    pub kind: LimitKind,
    /// Its value, in words (e.g. "30 s", "512 MiB").
    pub limit: String,
    /// What happened and what it means for the sandbox.
    pub message: String,
}

/// An image produced by the execution (e.g. a plot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ExecImage {
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
    /// Base64 data (not serialized into the structured result).
    #[serde(skip)]
    pub data_base64: String,
    /// Guest path of the full-size file, when one was saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// What one execution used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Usage {
    /// Wall time, in milliseconds.
    pub wall_ms: f64,
    /// CPU time the guest burned, in milliseconds (local sandboxes: on the
    /// clock of the thread that ran it, so waiting is not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<f64>,
    /// Fuel burned, when metered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// The interpreter's memory after the execution, in bytes (its peak: it
    /// never shrinks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Whether any output was cut.
    pub output_truncated: bool,
    /// What the guest asked of the host through its door (tool calls and
    /// HTTP requests), when it used it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub door: Option<DoorUsage>,
}

/// The result of one execution.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Execution {
    /// Standard output.
    pub stdout: CapturedText,
    /// Standard error.
    pub stderr: CapturedText,
    /// `repr()` of the value of a trailing expression, as a notebook shows it.
    pub value: Option<String>,
    /// The exception the code raised, if any.
    pub error: Option<ExecError>,
    /// The limit the execution hit, if any.
    pub limit: Option<LimitHit>,
    /// Set when in-memory state (variables, imports) was lost: the interpreter
    /// was stopped during this call, or restarted before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_lost: Option<String>,
    /// Something the client should know that does not change this result
    /// (that the sandbox's variables are no longer kept across a restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Images the execution produced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ExecImage>,
    /// Files the execution created or changed in the sandbox (newest first;
    /// local sandboxes). Read them with read_file, or as resources.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ChangedFile>,
    /// More files it created or changed, not listed in `files`.
    #[serde(skip_serializing_if = "is_zero")]
    pub files_not_listed: usize,
    /// What the execution used.
    pub usage: Usage,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A file an execution created or changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ChangedFile {
    /// Its path in the sandbox.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Execution {
    /// Whether the call should be reported to the client as an error: the
    /// code raised, or a limit stopped or failed it (output cut short is not
    /// an error: the code ran to the end).
    pub fn is_error(&self) -> bool {
        self.error.is_some()
            || self
                .limit
                .as_ref()
                .is_some_and(|l| l.kind != LimitKind::Output)
    }

    /// Records the output limit (`output_bytes` per stream) as the limit hit
    /// when a stream was cut and no other limit was. Where the whole output
    /// is, the stream's own text says (once).
    pub fn note_output_limit(&mut self, output_bytes: usize) {
        if !(self.stdout.truncated || self.stderr.truncated) || self.limit.is_some() {
            return;
        }
        let limit = human_bytes(output_bytes as u64);
        self.limit = Some(LimitHit {
            kind: LimitKind::Output,
            limit: format!("{limit} per stream"),
            message: format!(
                "output over {limit} per stream: its middle was left out of the result (the stream's text says where the whole is); the code ran to the end"
            ),
        });
    }
}

/// Kind of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (not followed).
    Symlink,
    /// Anything else.
    Other,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileEntry {
    /// File name.
    pub name: String,
    /// Full guest path.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Size in bytes (of the link itself for symbolic links).
    pub size: u64,
    /// Last modification time, RFC 3339 in UTC, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
}

/// A directory listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Listing {
    /// Entries, sorted by name.
    pub entries: Vec<FileEntry>,
    /// Whether entries were left out because the directory is very large.
    pub truncated: bool,
}

/// How file content is encoded in a request or result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text.
    #[default]
    #[serde(rename = "utf-8", alias = "utf8", alias = "text")]
    Utf8,
    /// Base64 (standard alphabet) of arbitrary bytes.
    Base64,
}

/// The content of a file read from a sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileContent {
    /// The bytes read, from the offset asked for (at most the length asked for).
    pub bytes: Vec<u8>,
    /// The file's full size.
    pub size: u64,
    /// Whether the file goes on past `bytes`.
    pub truncated: bool,
}

/// Memory and disk a sandbox uses now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ResourceUsage {
    /// The interpreter's memory, in bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Bytes of files in the sandbox directory, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Files and directories in the sandbox directory, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_files: Option<u64>,
    /// Why the disk use could not be measured (writes are refused meanwhile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_error: Option<String>,
    /// Whether the sandbox's interpreter was taken from the warm pool
    /// rather than started for it (local sandboxes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_warm_pool: Option<bool>,
    /// The files the server wrote into the sandbox on its own account
    /// (local sandboxes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_files: Option<ServerFilesUsage>,
}

/// The files the server writes into a sandbox on its own account (spilled
/// output and saved figures, in `/.outputs/`). They count against its disk
/// quota, and give way, oldest first, whenever a write of the sandbox's own
/// would not fit otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ServerFilesUsage {
    /// How many there are now.
    pub files: u64,
    /// Bytes they hold now (included in `disk_bytes`).
    pub bytes: u64,
    /// How many were deleted (or cut, while being written) so far to make
    /// room for the sandbox's own files.
    pub given_way_files: u64,
    /// Bytes those held.
    pub given_way_bytes: u64,
}

/// Where an installed package came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PackageSource {
    /// The host's download cache (no network request).
    Cache,
    /// The configured package index.
    Index,
    /// The local wheelhouse directory.
    Wheelhouse,
    /// The package manager inside a remote sandbox.
    Remote,
    /// The runtime itself: built in, not installed.
    Runtime,
}

/// One package an install put in place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct InstalledPackage {
    /// Normalized project name.
    pub name: String,
    /// Version installed.
    pub version: String,
    /// Where it came from (absent for packages that were already present).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PackageSource>,
    /// The version built into the runtime that this one replaces, in this
    /// sandbox only (a pure-Python built-in gives way to the version asked
    /// for or needed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces_built_in: Option<String>,
}

/// The outcome of installing packages into a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct InstallReport {
    /// Packages newly installed, dependencies included.
    pub installed: Vec<InstalledPackage>,
    /// Requested packages (or dependencies) that were already installed.
    pub already_present: Vec<InstalledPackage>,
    /// Log text from the installer, when it produced one (remote backends).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Installed modules whose import fails in the sandbox (tried in an
    /// interpreter of its own right after the install).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub import_failures: Vec<ImportFailure>,
    /// The top-level modules the new packages install, for that check.
    #[serde(skip)]
    #[schemars(skip)]
    pub modules: Vec<String>,
}

/// An installed module whose import fails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ImportFailure {
    /// The module, e.g. `black`.
    pub module: String,
    /// What its import raised, e.g. `ImportError: cannot import name 'getuid' from 'os'`.
    pub error: String,
}

/// Formats a byte count for people: `512 MiB`, `1.5 KiB`, `12 bytes`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() < 0.05 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Formats a duration for people: `30 s`, `1.5 s`, `250 ms`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 1.0 {
        if secs.fract() < 0.001 {
            format!("{secs:.0} s")
        } else {
            format!("{secs:.1} s")
        }
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_naturally() {
        assert_eq!(human_bytes(12), "12 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
    }

    #[test]
    fn an_execution_timeout_over_the_maximum_is_refused() {
        let limits = SandboxLimits {
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(60),
            memory_bytes: 1 << 29,
            fuel: None,
            cpu: None,
            output_bytes: 1 << 20,
            output_file_bytes: 1 << 24,
            disk_bytes: 1 << 28,
            disk_files: 10_000,
            image_bytes: 1 << 19,
            max_images: 8,
            open_files: 256,
        };
        assert_eq!(
            limits.for_execution(None).unwrap().timeout,
            Duration::from_secs(30)
        );
        assert_eq!(
            limits
                .for_execution(Some(Duration::from_secs(5)))
                .unwrap()
                .timeout,
            Duration::from_secs(5)
        );
        let over = limits
            .for_execution(Some(Duration::from_secs(600)))
            .unwrap_err()
            .to_string();
        assert!(over.contains("maximum of 60"), "{over}");
    }
}

/// A saved sandbox as `get_sandbox_status` shows it.
#[derive(Clone, Debug, Serialize, JsonSchema, PartialEq, Eq)]
pub struct SavedSandbox {
    /// The sandbox's id: a call naming it restores it.
    pub session_id: String,
    /// Its runtime.
    pub runtime: String,
    /// When it was saved (seconds since the Unix epoch).
    pub saved_at: u64,
    /// Bytes it takes on disk (state and files).
    pub bytes: u64,
    /// Whether its variables and imports come back (otherwise only its files).
    pub state_kept: bool,
}

/// What of a sandbox comes back after the server restarts (or is killed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeptAcrossRestarts {
    /// Its files and its interpreter's state (variables, imports,
    /// definitions), as of its last completed execution.
    FilesAndVariables,
    /// Its files only: its runtime's interpreter cannot be saved.
    FilesOnly,
    /// Nothing: it closes with the server.
    Nothing,
}
