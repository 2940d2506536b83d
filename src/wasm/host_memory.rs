//! [`check_compile_memory`]: refuses, with the figures, to compile a runtime
//! on a machine that has too little memory available for it, instead of
//! letting the kernel's out-of-memory killer end the server halfway.

/// Where Linux tells how much memory is available.
const MEMINFO: &str = "/proc/meminfo";

/// Compiling would need more memory than the machine has available.
#[derive(Debug, thiserror::Error)]
#[error(
    "compiling the runtime '{runtime}' needs about {needed_mb} MiB of memory, but this machine has {available_mb} MiB available (MemAvailable in /proc/meminfo). Free memory and try again, or compile it once where there is enough (`mcp-code-sandbox prepare {runtime}`) and copy the module cache ({cache}) here"
)]
pub struct NotEnoughMemory {
    /// The runtime's name.
    pub runtime: String,
    /// What compiling it takes, in MiB.
    pub needed_mb: u64,
    /// What the machine has available, in MiB.
    pub available_mb: u64,
    /// The module cache directory.
    pub cache: String,
}

/// Checks that the machine has `needed_mb` MiB available for compiling
/// `runtime`. Where the figure cannot be read (not Linux), it lets the
/// compile go ahead.
pub fn check_compile_memory(
    runtime: &str,
    needed_mb: u64,
    cache: &std::path::Path,
) -> Result<(), NotEnoughMemory> {
    let Some(available_mb) = std::fs::read_to_string(MEMINFO)
        .ok()
        .and_then(|text| mem_available_mb(&text))
    else {
        tracing::debug!("cannot read MemAvailable from {MEMINFO}; not checking memory");
        return Ok(());
    };
    if available_mb < needed_mb {
        return Err(NotEnoughMemory {
            runtime: runtime.to_owned(),
            needed_mb,
            available_mb,
            cache: cache.display().to_string(),
        });
    }
    Ok(())
}

/// `MemAvailable` of a `/proc/meminfo` text, in MiB.
fn mem_available_mb(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let mut parts = line.split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value / 1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_mib() {
        let text = "MemTotal:       24684084 kB\nMemFree:        11020160 kB\nMemAvailable:   23569076 kB\n";
        assert_eq!(mem_available_mb(text), Some(23016));
        assert_eq!(mem_available_mb("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available_mb("MemAvailable: lots\n"), None);
    }

    #[test]
    fn the_refusal_quotes_both_figures_and_the_way_out() {
        let err = NotEnoughMemory {
            runtime: "scientific".into(),
            needed_mb: 2600,
            available_mb: 900,
            cache: "/c/modules".into(),
        }
        .to_string();
        assert!(err.contains("2600 MiB") && err.contains("900 MiB"), "{err}");
        assert!(err.contains("prepare scientific"), "{err}");
    }
}
