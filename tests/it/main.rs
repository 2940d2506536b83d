//! Integration tests: the real binary, driven over MCP stdio by rmcp's client.
//! They need the runtime (`./fetch-python.sh`) and no network.

mod cli;
mod execution;
mod files;
mod index_server;
mod limits;
mod packages;
mod sandboxes;
mod support;
mod tools;
mod wheels;
