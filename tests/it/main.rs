//! Integration tests: the real binary, driven over MCP stdio by rmcp's client.
//! They need the runtimes (`./fetch-python.sh` and `./fetch-python.sh --runtime
//! scientific`) and no network; the E2B tests run against a fake of E2B on
//! loopback (and need `python3`).

mod auth;
mod behaviour;
mod budgets;
mod bundle;
mod cli;
mod deploy;
mod disk_blocks;
mod docs;
mod durable;
mod durable_hostile;
mod e2b;
mod e2b_fake;
mod execution;
mod files;
mod hostile;
mod http;
mod http_caps;
mod http_owners;
mod limits;
mod network;
mod network_rebinding;
mod notebook;
mod notebook_http;
mod notebook_http_edges;
mod notebook_pip;
mod notebook_pip_edges;
mod notebook_threads;
mod packages;
mod packages_bytecode;
mod packages_hostile;
mod packages_ranges;
mod packages_sources;
mod pip_corpus;
mod protocol;
mod real_wheels;
mod requests;
mod restore_caps;
mod restore_races;
mod sandboxes;
mod scale_out;
mod scientific;
mod server_files;
mod snapshots;
mod soak;
mod support;
mod tools;
mod upstreams;
mod wheels;
