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
//! - `http`: the HTTP client: system certificates, proxies from the
//!   environment, timeouts, retries, capped and hashed downloads.
//! - `index`: the configured indexes, asked in order, with a short-lived
//!   page cache.
//! - [`wheelhouse`]: a local directory of wheels, used before any index, and
//!   filling one (`mcp-code-sandbox wheelhouse add`).
//! - `cache`: downloaded wheels on the host, keyed by sha256.
//! - `metadata`: `METADATA` and `WHEEL` files (RFC 822-style headers).
//! - `resolver`: picks one version of every package needed, newest first,
//!   honouring specifiers, markers, extras and `Requires-Python`.
//! - `record`: a wheel's `RECORD` (paths, hashes, sizes).
//! - `unpack`: the safe extractor: every member checked, every byte counted
//!   and hashed against `RECORD`, written beneath a staging directory.
//! - `site_packages`: what a sandbox already has, and moving staged files
//!   into place.
//! - [`installer`]: the [`Installer`] that ties these together.
//! - [`settings`]: where packages come from and the caps on an install.
//! - [`error`]: [`PackageError`], every message saying what to do next.

pub mod built_in;
pub(crate) mod cache;
pub(crate) mod environment;
pub mod error;
pub(crate) mod http;
pub(crate) mod index;
pub mod installer;
pub(crate) mod metadata;
pub(crate) mod project_file;
pub(crate) mod record;
pub mod requirement;
pub(crate) mod resolver;
pub mod settings;
pub(crate) mod simple_page;
pub(crate) mod site_packages;
pub(crate) mod unpack;
pub(crate) mod wheel_name;
pub mod wheelhouse;

#[cfg(test)]
pub(crate) mod test_wheel;

pub use built_in::BuiltInPackages;
pub use error::PackageError;
pub use installer::{InstallTarget, Installer};
pub use requirement::split_requirements;
pub use settings::{IndexUrl, PackageSettings};
