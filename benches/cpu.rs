//! CPU-bound Python: a small suite run in a sandbox of each runtime
//! (python-3.12, and scientific when it is fetched) with fuel metering on and
//! off, and under the machine's native `python3` when there is one, so the
//! report shows the cost of WebAssembly, of metering, and the difference
//! between the two builds side by side.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::sandbox::manager::{CreateRequest, Sandbox};

/// (name, set-up code, timed statement)
const SUITE: &[(&str, &str, &str)] = &[
    (
        "recursion_fib25",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        "fib(25)",
    ),
    (
        "sort_100k_strings",
        "import random\nrandom.seed(1)\nwords = [str(random.random()) for _ in range(100_000)]",
        "len(sorted(words))",
    ),
    (
        "json_round_trip_10k",
        "import json\ndocs = [{'id': i, 'name': f'item {i}', 'tags': ['a', 'b'], 'score': i / 7} for i in range(10_000)]",
        "len(json.loads(json.dumps(docs)))",
    ),
    (
        "regex_scan",
        "import re\ntext = 'user@example.org, x@y.z; ' * 20_000\npattern = re.compile(r'[\\w.]+@[\\w.]+')",
        "len(pattern.findall(text))",
    ),
    (
        "bigint_pow_str",
        "import sys\nsys.set_int_max_str_digits(0)",
        "len(str(7 ** 30_000))",
    ),
];

/// The budget the metered app gives each execution (the server's default
/// before fuel metering was turned off by default).
const FUEL: &str = "5000000000000";

/// An app with fuel metering on (`Some(budget)`) or off (`None`, the default).
fn app(rt: &tokio::runtime::Runtime, fuel: Option<&str>) -> App {
    match fuel {
        Some(fuel) => common::app(rt, "cpu", &["--pool-size", "0", "--fuel", fuel]),
        None => common::app(rt, "cpu", &["--pool-size", "0"]),
    }
}

/// The runtimes compared, and the prefix of their bench names (python-3.12
/// keeps the plain `wasm_` names of earlier reports).
const RUNTIMES: &[(&str, &str)] = &[("python-3.12", "wasm"), ("scientific", "scientific")];

/// A sandbox of `runtime` in `app`; `None` (with a note) when that runtime
/// cannot be loaded here.
fn sandbox(rt: &tokio::runtime::Runtime, app: &App, runtime: &str) -> Option<Arc<Sandbox>> {
    let request = CreateRequest {
        runtime: Some(runtime.to_owned()),
        ..CreateRequest::default()
    };
    match rt.block_on(app.manager.create(request)) {
        Ok((sandbox, _)) => Some(sandbox),
        Err(e) => {
            eprintln!("note: skipping the runtime {runtime}: {e}");
            None
        }
    }
}

async fn run(sandbox: &Sandbox, code: &str) {
    common::run_ok(sandbox, code).await;
}

/// A native python3 that runs statements on request and reports their time.
struct Native {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Native {
    fn start() -> Option<Self> {
        let mut child = Command::new("python3")
            .args([
                "-u",
                "-c",
                "import sys, time\nns = {}\nfor line in sys.stdin:\n    kind, src = line.split(' ', 1)\n    src = src.encode().decode('unicode_escape')\n    t = time.perf_counter()\n    exec(src, ns)\n    print(time.perf_counter() - t if kind == 'T' else 0, flush=True)",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let input = child.stdin.take()?;
        let output = BufReader::new(child.stdout.take()?);
        Some(Self {
            child,
            input,
            output,
        })
    }

    fn exec(&mut self, kind: char, code: &str) -> Duration {
        let escaped = code.escape_default().to_string();
        writeln!(self.input, "{kind} {escaped}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        Duration::from_secs_f64(line.trim().parse().unwrap())
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

fn cpu(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let metered = app(&rt, Some(FUEL));
    let unmetered = app(&rt, None);
    // (bench name prefix, sandbox with fuel, sandbox without)
    let mut sandboxes = Vec::new();
    for (runtime, prefix) in RUNTIMES {
        if let (Some(on), Some(off)) = (
            sandbox(&rt, &metered, runtime),
            sandbox(&rt, &unmetered, runtime),
        ) {
            sandboxes.push((*prefix, on, off));
        }
    }
    let mut native = Native::start();
    if native.is_none() {
        eprintln!("note: no native python3 on this machine; the native column is skipped");
    }

    for (name, setup, statement) in SUITE {
        let mut group = c.benchmark_group(format!("cpu/{name}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(8));
        for (prefix, with_fuel, without_fuel) in &sandboxes {
            rt.block_on(run(with_fuel, setup));
            rt.block_on(run(without_fuel, setup));
            group.bench_function(format!("{prefix}_fuel_on"), |b| {
                b.to_async(&rt).iter(|| run(with_fuel, statement))
            });
            group.bench_function(format!("{prefix}_fuel_off"), |b| {
                b.to_async(&rt).iter(|| run(without_fuel, statement))
            });
        }
        if let Some(native) = native.as_mut() {
            native.exec('S', setup);
            group.bench_function("native_python3", |b| {
                b.iter_custom(|iters| (0..iters).map(|_| native.exec('T', statement)).sum())
            });
        }
        group.finish();
    }
    rt.block_on(metered.manager.close_all());
    rt.block_on(unmetered.manager.close_all());
}

criterion_group!(benches, cpu);
criterion_main!(benches);
