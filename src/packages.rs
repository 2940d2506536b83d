//! Installing pure-Python wheels into a local sandbox: requirements in, files
//! in the sandbox's site-packages out, with nothing run on the host.
//!
//! The path of one install, file by file:
//!
//! - [`requirement`]: what the user typed (`attrs==23.2.0, six`) becomes PEP 508
//!   requirements with normalized names; URLs and paths are refused.
//! - `environment`: the marker environment of a WASI CPython
//!   (`sys_platform == "wasi"`, ...), against which `Requires-Dist` markers are
//!   evaluated.
//! - `wheel_name`: wheel file names and their tags; which ones a WASI CPython
//!   can take (pure Python only).
//! - `project_file`: one file a source offers, and what kind it is.
//! - `simple_page`: the index's project pages (PEP 691 JSON, PEP 503 HTML)
//!   read into a list of files with their hashes.
//! - `credentials`: where index credentials may go (the index's own origin,
//!   never after a redirect off it).
//! - `http`: the HTTP client: system certificates, proxies from the
//!   environment, timeouts, retries, redirects checked hop by hop, capped and
//!   hashed downloads.
//! - `index`: the configured indexes, asked in order; pages read up to a cap
//!   and parsed off the async workers.
//! - `page_cache`: parsed index pages kept for a few minutes, bounded.
//! - `pip_index`: with nothing configured, the index the machine's pip
//!   names, asked once.
//! - [`wheelhouse`]: a local directory of wheels, used before any index, and
//!   filling one (`mcp-code-sandbox wheelhouse add`).
//! - `cache`: downloaded wheels on the host, keyed by sha256, bounded on disk
//!   (least recently used first out).
//! - `metadata`: `METADATA` and `WHEEL` files (RFC 822-style headers);
//!   `metadata_error`: why one is refused.
//! - `resolver`: picks one version of every package needed, newest first,
//!   honouring specifiers, markers, extras and `Requires-Python`.
//! - `record`: a wheel's `RECORD` (paths, hashes, sizes).
//! - `unpack`: the safe extractor: every member checked, every byte counted
//!   and hashed against `RECORD`, written beneath a staging directory.
//! - `site_packages`: what a sandbox already has (a bounded read of guest
//!   data), and moving staged files into place.
//! - `stop`: when an install must give up (cancelled, or past its deadline).
//! - `budget`: what one install may still spend (resolver steps, bytes
//!   downloaded).
//! - `staging`: what one install may still write into its sandbox (the
//!   sandbox's quota, the install's cap), charged as bytes are inflated.
//! - `offload`: running an install on a blocking thread.
//! - `session`: one install's view of the sources, fetching wheels and
//!   their metadata.
//! - [`bytecode`]: the installed modules' bytecode, compiled once per wheel
//!   and runtime by the backend and kept on the host.
//! - `place`: unpacking into staging and moving the result into place.
//! - [`installer`]: the [`Installer`] that ties these together.
//! - [`settings`]: where packages come from and the caps on an install.
//! - [`error`]: [`PackageError`], every message saying what to do next.

pub(crate) mod budget;
pub mod built_in;
pub mod bytecode;
pub(crate) mod cache;
pub(crate) mod credentials;
pub(crate) mod environment;
pub mod error;
pub(crate) mod http;
pub(crate) mod index;
pub mod installer;
pub(crate) mod message_text;
pub(crate) mod metadata;
pub(crate) mod metadata_error;
pub(crate) mod offload;
pub(crate) mod page_cache;
pub(crate) mod pip_index;
pub(crate) mod place;
pub(crate) mod project_file;
pub(crate) mod record;
pub(crate) mod remote_wheel;
pub mod requirement;
pub(crate) mod resolver;
pub(crate) mod session;
pub mod settings;
pub(crate) mod simple_page;
pub(crate) mod site_packages;
pub(crate) mod sources;
pub(crate) mod staging;
pub(crate) mod stop;
pub(crate) mod unpack;
pub(crate) mod wheel_name;
pub mod wheelhouse;
pub mod wheelhouse_add;

#[cfg(test)]
pub(crate) mod test_wheel;

pub use built_in::{BuiltInError, BuiltInPackages};
pub use environment::PythonVersionError;
pub use error::PackageError;
pub use installer::Installer;
pub use place::InstallTarget;
pub use requirement::split_requirements;
pub use settings::{IndexUrl, IndexUrlError, PackageSettings};
