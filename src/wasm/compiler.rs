//! [`GuestCompiler`]: compiles installed wheels' modules into bytecode with
//! the sandbox's own runtime, so the `.pyc` files match the interpreter
//! that imports them.
//!
//! Each compile runs in an interpreter of its own, started for it in a new
//! directory of the sandbox root and closed after: no guest code has run in
//! it, and it sees only the sources the host copied in from the verified
//! wheels (never a sandbox's files), so what it writes can be kept on the
//! host and handed to every later install of those wheels. The sources are
//! compiled, never run. It is bounded like a sandbox: the memory cap (and
//! the server's memory budget), a disk quota sized to the sources, and the
//! time the install gives it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::capture::OutputCapture;
use super::guest_image::GuestImage;
use super::interpreter::START_TIMEOUT;
use super::interpreter::{CallLimits, DirState, Interpreter, Outcome};
use super::protocol::{Request, decode_reply};
use crate::packages::bytecode::{CompileFailure, Compiler, Pyc, WheelSources};
use crate::sandbox::SandboxLimits;
use crate::sandbox::root::SandboxRoot;

/// Where the sources go in the compiling interpreter's directory: one
/// numbered directory per wheel.
const SOURCES: &str = "src";

/// Most bytes of bytecode read back from one compile.
const MAX_PYC_BYTES: u64 = 512 << 20;

/// Compiles every `.py` under `/src/<n>`, writing each one's
/// timestamp-checked `.pyc` (recording wheel `n`'s time) where CPython
/// looks for it; a source that does not compile is left without, as pip
/// leaves it.
const COMPILE_ALL: &str = r#"
def _compile_all(top, times):
    import os
    import importlib.util
    from importlib._bootstrap_external import _code_to_timestamp_pyc
    for wheel, mtime in times.items():
        for root, dirs, files in os.walk(os.path.join(top, wheel)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    source = f.read()
                try:
                    code = compile(source, path, "exec", dont_inherit=True)
                except Exception:
                    continue
                target = importlib.util.cache_from_source(path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(_code_to_timestamp_pyc(code, mtime, len(source)))
"#;

/// The runtime's compiler of installed modules.
#[derive(Clone)]
pub(crate) struct GuestCompiler {
    image: Arc<GuestImage>,
    root: Arc<SandboxRoot>,
    memory_bytes: u64,
}

impl std::fmt::Debug for GuestCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestCompiler")
            .field("runtime", &self.image.manifest.name)
            .finish_non_exhaustive()
    }
}

impl GuestCompiler {
    /// A compiler with `image`'s runtime, working in `root`, its interpreter
    /// capped at `memory_bytes`.
    pub(crate) fn new(image: Arc<GuestImage>, root: Arc<SandboxRoot>, memory_bytes: u64) -> Self {
        Self {
            image,
            root,
            memory_bytes,
        }
    }

    /// Limits of the compiling interpreter: room on disk for the sources
    /// and their bytecode.
    fn limits(&self, wheels: &[WheelSources]) -> SandboxLimits {
        let files: u64 = wheels.iter().map(|w| w.sources.len() as u64).sum();
        let bytes: u64 = wheels.iter().map(WheelSources::bytes).sum();
        SandboxLimits {
            timeout: START_TIMEOUT,
            max_timeout: START_TIMEOUT,
            memory_bytes: self.memory_bytes,
            fuel: None,
            cpu: None,
            output_bytes: 16 << 10,
            output_file_bytes: 0,
            // Bytecode is about as large as its source; more is a wheel
            // built to cost, and its compile fails (and is not tried again).
            disk_bytes: bytes.saturating_mul(3).saturating_add(16 << 20),
            disk_files: files.saturating_mul(4).saturating_add(1024),
            image_bytes: 0,
            max_images: 0,
            open_files: 64,
        }
    }
}

#[async_trait]
impl Compiler for GuestCompiler {
    fn runtime_key(&self) -> String {
        let manifest = &self.image.manifest;
        format!(
            "{} {} {}",
            manifest.name, manifest.python_version, manifest.sha256
        )
    }

    async fn compile(
        &self,
        wheels: Vec<WheelSources>,
        within: Duration,
        cancel: &CancellationToken,
    ) -> Vec<Result<Vec<Pyc>, CompileFailure>> {
        let groups = share_out(&wheels, compilers_for(&wheels));
        let compiled = futures::future::join_all(groups.iter().map(|group| {
            let part: Vec<WheelSources> = group.iter().map(|&n| wheels[n].clone()).collect();
            async move { self.compile_group(&part, within, cancel).await }
        }))
        .await;
        let mut all: Vec<Result<Vec<Pyc>, CompileFailure>> = vec![
            Err(CompileFailure {
                why: "not compiled".into(),
                alone: false,
            });
            wheels.len()
        ];
        for (group, result) in groups.iter().zip(compiled) {
            match result {
                Ok(each) => {
                    for (&n, pycs) in group.iter().zip(each) {
                        all[n] = Ok(pycs);
                    }
                }
                Err(why) => {
                    // A group's failure is blamed on a wheel only when it
                    // was compiled alone.
                    for &n in group {
                        all[n] = Err(CompileFailure {
                            why: why.clone(),
                            alone: group.len() == 1,
                        });
                    }
                }
            }
        }
        all
    }
}

/// Source bytes below which one interpreter compiles everything (starting
/// a second costs more than it saves).
const ONE_COMPILER_BYTES: u64 = 2 << 20;

/// How many interpreters compile `wheels` side by side: one per core (at
/// most four) for large installs.
fn compilers_for(wheels: &[WheelSources]) -> usize {
    let bytes: u64 = wheels.iter().map(WheelSources::bytes).sum();
    if bytes < ONE_COMPILER_BYTES {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.clamp(1, 4).min(wheels.len())
}

/// The wheels' indices shared out into `groups` of about equal source
/// bytes (largest first, each to the lightest group).
fn share_out(wheels: &[WheelSources], groups: usize) -> Vec<Vec<usize>> {
    let size = |n: usize| wheels[n].bytes();
    let mut order: Vec<usize> = (0..wheels.len()).collect();
    order.sort_by_key(|&n| std::cmp::Reverse(size(n)));
    let mut shared: Vec<(u64, Vec<usize>)> = vec![(0, Vec::new()); groups.max(1)];
    for n in order {
        let lightest = shared
            .iter_mut()
            .min_by_key(|(bytes, _)| *bytes)
            .expect("at least one group");
        lightest.0 += size(n);
        lightest.1.push(n);
    }
    shared
        .into_iter()
        .map(|(_, mut group)| {
            group.sort_unstable();
            group
        })
        .filter(|group| !group.is_empty())
        .collect()
}

impl GuestCompiler {
    /// Compiles one group of wheels in an interpreter of its own, in a new
    /// directory removed after.
    async fn compile_group(
        &self,
        wheels: &[WheelSources],
        time: Duration,
        cancel: &CancellationToken,
    ) -> Result<Vec<Vec<Pyc>>, String> {
        let dir = self.root.create_sandbox_dir().map_err(|e| e.to_string())?;
        let result = self.compile_in(&dir, wheels, time, cancel).await;
        self.root.remove_sandbox_dir(&dir);
        result
    }

    /// [`Compiler::compile`] in the new directory `dir`: copy the sources
    /// in, compile them in an interpreter started there, read the bytecode.
    async fn compile_in(
        &self,
        dir: &Path,
        wheels: &[WheelSources],
        time: Duration,
        cancel: &CancellationToken,
    ) -> Result<Vec<Vec<Pyc>>, String> {
        write_sources(dir, wheels).map_err(|e| format!("could not copy the sources: {e}"))?;
        let limits = self.limits(wheels);
        let ledger = self
            .root
            .open_ledger(dir, &limits)
            .map_err(|e| e.to_string())?;
        let mut interpreter = tokio::time::timeout(
            time,
            Interpreter::start(
                &self.image,
                dir,
                DirState::Fresh,
                ledger,
                &limits,
                START_TIMEOUT.min(time),
                None,
            ),
        )
        .await
        .map_err(|_| "the compiler did not start in time".to_owned())?
        .map_err(|e| format!("the compiler did not start: {e}"))?;
        let times: Vec<String> = wheels
            .iter()
            .enumerate()
            .map(|(n, wheel)| format!("'{n}': {}", wheel.time))
            .collect();
        let code = format!(
            "{COMPILE_ALL}\n_compile_all('/{SOURCES}', {{{}}})\n",
            times.join(", ")
        );
        let request = Request::Exec {
            filename: "<compile>",
            code: &code,
            image_bytes: 0,
            max_images: 0,
            figure_prefix: "/.outputs/compile",
            text_limit: 4096,
        };
        let call_limits = CallLimits {
            fuel: None,
            cpu: Some(time),
            timeout: time,
            reply_bytes: 64 << 10,
        };
        let (outcome, _, _) = interpreter
            .call(
                &request,
                call_limits,
                cancel,
                OutputCapture::memory(4 << 10),
                OutputCapture::memory(4 << 10),
            )
            .await;
        interpreter.kill();
        match outcome {
            Outcome::Reply { body, .. } => match decode_reply(&body) {
                Ok(reply) => match reply.error {
                    None => read_bytecode(dir, wheels.len()),
                    Some(e) => Err(format!("compiling raised {}: {}", e.name, e.value)),
                },
                Err(e) => Err(format!("the compiler's reply is unreadable: {e}")),
            },
            Outcome::TimedOut => Err(format!("compiling took longer than {time:?}")),
            Outcome::Cancelled | Outcome::CancelledUnstarted => {
                Err("the install was stopped".into())
            }
            Outcome::Exited(exit) => Err(format!("the compiler stopped: {exit}")),
        }
    }
}

/// Copies each wheel's sources under `dir/src/<n>/`.
fn write_sources(dir: &Path, wheels: &[WheelSources]) -> std::io::Result<()> {
    for (n, wheel) in wheels.iter().enumerate() {
        let top = dir.join(SOURCES).join(n.to_string());
        for source in &wheel.sources {
            let path = top.join(&source.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, &source.text)?;
        }
    }
    Ok(())
}

/// The `.pyc` files the compile wrote for each wheel, by path relative to
/// the wheel's directory (so to site-packages).
fn read_bytecode(dir: &Path, wheels: usize) -> Result<Vec<Vec<Pyc>>, String> {
    let mut total = 0u64;
    let mut all = Vec::with_capacity(wheels);
    for n in 0..wheels {
        let top = dir.join(SOURCES).join(n.to_string());
        let mut pycs = Vec::new();
        let mut pending: Vec<PathBuf> = vec![top.clone()];
        while let Some(at) = pending.pop() {
            let entries = std::fs::read_dir(&at).map_err(|e| e.to_string())?;
            for entry in entries {
                let entry = entry.map_err(|e| e.to_string())?;
                let kind = entry.file_type().map_err(|e| e.to_string())?;
                let path = entry.path();
                if kind.is_dir() {
                    pending.push(path);
                } else if kind.is_file() && path.extension().is_some_and(|e| e == "pyc") {
                    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
                    total += bytes.len() as u64;
                    if total > MAX_PYC_BYTES {
                        return Err("the bytecode is larger than the most read back".into());
                    }
                    let Ok(relative) = path.strip_prefix(&top) else {
                        continue;
                    };
                    let relative: Vec<String> = relative
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    pycs.push(Pyc {
                        path: relative.join("/"),
                        bytes,
                    });
                }
            }
        }
        pycs.sort_by(|a, b| a.path.cmp(&b.path));
        all.push(pycs);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::bytecode::PythonSource;

    fn wheel(bytes: usize) -> WheelSources {
        WheelSources {
            time: 0,
            sources: vec![PythonSource {
                path: "m.py".into(),
                text: vec![b'#'; bytes],
            }],
        }
    }

    #[test]
    fn wheels_are_shared_out_by_size_and_keep_their_order_in_each_group() {
        let wheels = [wheel(10), wheel(100), wheel(60), wheel(50)];
        assert_eq!(share_out(&wheels, 2), [vec![0, 1], vec![2, 3]]);
        assert_eq!(share_out(&wheels, 1), [vec![0, 1, 2, 3]]);
        assert_eq!(share_out(&wheels[..1], 3), [vec![0]], "no empty group");
        assert_eq!(compilers_for(&wheels), 1, "small installs use one");
    }
}
