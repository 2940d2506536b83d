//! Integration tests: the real binary, driven over MCP stdio by rmcp's client.
//! They need the runtime (`./fetch-python.sh`) and no network.

mod cli;
mod execution;
mod files;
mod hostile;
mod limits;
mod requests;
mod sandboxes;
mod support;
mod tools;
