//! [`classify`]: the one place that turns how a guest ended into an outcome.

use std::fmt;

use wasmtime::Trap;

use super::cpu_clock::CpuBudgetSpent;
use wasmtime_wasi::I32Exit;

/// Why a guest interpreter is no longer running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestExit {
    /// The program ended the interpreter with this exit status.
    Exited(i32),
    /// It burned its whole fuel budget.
    OutOfFuel,
    /// Its call used its whole CPU-time budget.
    OutOfCpu,
    /// It overflowed the WebAssembly stack.
    StackOverflow,
    /// It held more open files (WASI resources) than its table allows.
    TooManyOpen,
    /// It trapped for another reason (the message says which).
    Trap(String),
    /// It was already gone before the call.
    Gone,
    /// The host failed to run it.
    Failed(String),
}

impl fmt::Display for GuestExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "the program exited with status {code}"),
            Self::OutOfFuel => f.write_str("all fuel consumed"),
            Self::OutOfCpu => f.write_str("the CPU-time budget was used up"),
            Self::StackOverflow => f.write_str("WebAssembly stack overflow"),
            Self::TooManyOpen => f.write_str("too many open files"),
            Self::Trap(message) => write!(f, "WebAssembly trap: {message}"),
            Self::Gone => f.write_str("the interpreter was no longer running"),
            Self::Failed(message) => f.write_str(message),
        }
    }
}

/// Classifies the end of a guest's `_start` by its root cause.
pub(crate) fn classify(result: wasmtime::Result<()>) -> GuestExit {
    let error = match result {
        Ok(()) => return GuestExit::Exited(0),
        Err(error) => error,
    };
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return GuestExit::Exited(exit.0);
    }
    if error.downcast_ref::<CpuBudgetSpent>().is_some() {
        return GuestExit::OutOfCpu;
    }
    if error
        .downcast_ref::<wasmtime::component::ResourceTableError>()
        .is_some()
    {
        return GuestExit::TooManyOpen;
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel => GuestExit::OutOfFuel,
            Trap::StackOverflow => GuestExit::StackOverflow,
            other => GuestExit::Trap(other.to_string()),
        };
    }
    GuestExit::Failed(format!("{error:#}"))
}
