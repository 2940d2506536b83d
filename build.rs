//! Sets `guest_stop_by_fault` where a running guest is stopped by blocking
//! its memory instead of by epoch checks in its compiled code (see
//! `src/wasm/fault_handler.rs`): Linux on x86-64 and arm64. Building with
//! `STOP_GUESTS_BY_EPOCHS=1` compiles the epoch checks other systems use
//! instead, so that path can be built and tested on Linux too.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(guest_stop_by_fault)");
    println!("cargo::rerun-if-env-changed=STOP_GUESTS_BY_EPOCHS");
    if std::env::var_os("STOP_GUESTS_BY_EPOCHS").is_some_and(|v| v == "1") {
        return;
    }
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os == "linux" && (arch == "x86_64" || arch == "aarch64") {
        println!("cargo::rustc-cfg=guest_stop_by_fault");
    }
}
