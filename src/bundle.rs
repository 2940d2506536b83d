//! Air-gapped deployment: a bundle is one directory holding everything a
//! runtime needs on a machine with no network at all, made on a connected
//! machine with `mcp-code-sandbox bundle` and used with `--bundle DIR`
//! (`SANDBOX_BUNDLE`), or installed with `fetch-python.sh --from DIR`.
//!
//! ```text
//! DIR/bundle.toml          which runtime, which server made it, its preload
//! DIR/SHA256SUMS           sha256 of every other file (`sha256sum -c` reads it)
//! DIR/bin/mcp-code-sandbox the server that made it
//! DIR/fetch-python.sh      installs the runtime from DIR (`--from DIR`)
//! DIR/runtime/             the runtime's manifest, module and artifacts
//! DIR/modules/             the runtime compiled for this machine's CPU and
//!                          wasmtime (and, for a snapshot runtime, its
//!                          pre-initialised snapshot)
//! DIR/wheelhouse/          wheels for install_package, when given
//! ```
//!
//! Its parts: [`sums`], the `SHA256SUMS` manifest, written and checked;
//! [`info`], `bundle.toml`; [`open`], checking a bundle before a server uses
//! it. Making one starts the server's runtimes, so it lives with the app
//! (`crate::app::make_bundle`).

pub mod info;
pub mod open;
pub mod sums;

pub use open::{Bundle, BundleError};
