//! Data analysis as people write it, timed inside a scientific sandbox and
//! in native CPython with the same libraries, in one run.
//!
//! Each snippet has a set-up (run once, untimed) and a statement whose time
//! is measured where it runs (`time.perf_counter` around it, inside the
//! sandbox and inside the native interpreter), so neither side pays for the
//! call that carries it. Both sides must give the same value for every
//! statement, or the bench fails: a fast wrong answer is not a result.
//!
//! The sandbox runs with the server's defaults (fuel metering off) and, for
//! comparison, with `SANDBOX_FUEL` set. The native interpreter is
//! `$NATIVE_PYTHON` (default `python3`; for the book's figures (docs/src/performance.md), CPython
//! 3.13 with numpy 2.5.2, pandas 3.0.6, scikit-learn 1.9.1, scipy 1.18.1 and
//! matplotlib 3.11.2, the versions the runtime carries), run single-threaded
//! (`OPENBLAS_NUM_THREADS=1`, `OMP_NUM_THREADS=1`) as the sandbox is. At the
//! end the bench prints each snippet's ratio and their geometric mean.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::sandbox::manager::{CreateRequest, Sandbox};

/// One snippet: its name, whether it is plain Python, its set-up, and the
/// statement timed (its value is compared between the two sides).
struct Snippet {
    name: &'static str,
    pure_python: bool,
    setup: &'static str,
    statement: &'static str,
}

const SNIPPETS: &[Snippet] = &[
    Snippet {
        name: "pure_fib",
        pure_python: true,
        setup: "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        statement: "fib(24)",
    },
    Snippet {
        name: "pure_sort_strings",
        pure_python: true,
        setup: "import random\nrandom.seed(1)\nwords = [str(random.random()) for _ in range(200_000)]",
        statement: "sorted(words)[1234]",
    },
    Snippet {
        name: "pure_json_round_trip",
        pure_python: true,
        setup: "import json\ndocs = [{'id': i, 'name': f'item {i}', 'tags': ['a', 'b'], 'score': i / 7} for i in range(20_000)]",
        statement: "len(json.loads(json.dumps(docs)))",
    },
    Snippet {
        name: "pure_dict_counting",
        pure_python: true,
        setup: "import random\nrandom.seed(2)\ntokens = [random.choice('abcdefghij') * random.randint(1, 4) for _ in range(300_000)]",
        statement: "import collections\nsorted(collections.Counter(tokens).items())[:3]",
    },
    Snippet {
        name: "pandas_groupby_1m",
        pure_python: false,
        setup: "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\ndf = pd.DataFrame({'k': rng.integers(0, 1000, 1_000_000), 'v': rng.random(1_000_000)})",
        statement: "round(float(df.groupby('k')['v'].agg(['sum', 'mean']).sum().sum()), 6)",
    },
    Snippet {
        name: "pandas_csv_round_trip_200k",
        pure_python: false,
        setup: "import io, numpy as np, pandas as pd\nrng = np.random.default_rng(1)\ncsv_df = pd.DataFrame({'a': rng.integers(0, 10**6, 200_000), 'b': rng.random(200_000).round(4), 'c': rng.choice(['x', 'y', 'z'], 200_000)})",
        statement: "buf = io.StringIO()\ncsv_df.to_csv(buf, index=False)\nback = pd.read_csv(io.StringIO(buf.getvalue()))\n(back.shape, int(back['a'].sum()))",
    },
    Snippet {
        name: "pandas_merge_pivot",
        pure_python: false,
        setup: "import numpy as np, pandas as pd\nrng = np.random.default_rng(2)\nleft = pd.DataFrame({'id': rng.integers(0, 50_000, 200_000), 'm': rng.integers(1, 13, 200_000), 'x': rng.random(200_000)})\nright = pd.DataFrame({'id': np.arange(50_000), 'g': rng.choice(list('ABCDEFGH'), 50_000)})",
        statement: "t = left.merge(right, on='id').pivot_table(index='g', columns='m', values='x', aggfunc='mean')\nround(float(t.to_numpy().sum()), 6)",
    },
    Snippet {
        name: "pandas_string_ops",
        pure_python: false,
        setup: "import numpy as np, pandas as pd\nrng = np.random.default_rng(3)\nnames = pd.Series(rng.choice(['alpha', 'beta', 'gamma', 'delta', 'Alpha Beta'], 200_000))",
        statement: "int(names.str.upper().str.contains('A B').sum()), int(names.str.len().sum())",
    },
    Snippet {
        name: "sklearn_random_forest_5k",
        pure_python: false,
        setup: "from sklearn.datasets import make_classification\nfrom sklearn.ensemble import RandomForestClassifier\nX, y = make_classification(n_samples=5000, n_features=20, random_state=0)",
        statement: "round(RandomForestClassifier(n_estimators=30, random_state=0, n_jobs=1).fit(X, y).score(X, y), 4)",
    },
    Snippet {
        name: "sklearn_logistic_regression",
        pure_python: false,
        setup: "from sklearn.datasets import make_classification\nfrom sklearn.linear_model import LogisticRegression\nXl, yl = make_classification(n_samples=20_000, n_features=30, random_state=1)",
        statement: "round(LogisticRegression(max_iter=500).fit(Xl, yl).score(Xl, yl), 3)",
    },
    Snippet {
        name: "numpy_sort_2m",
        pure_python: false,
        setup: "import numpy as np\nfloats = np.random.default_rng(4).random(2_000_000)",
        statement: "float(np.sort(floats)[123_456])",
    },
    Snippet {
        name: "numpy_matmul_300",
        pure_python: false,
        setup: "import numpy as np\nrng = np.random.default_rng(5)\nma, mb = rng.random((300, 300)), rng.random((300, 300))",
        statement: "round(float((ma @ mb).sum()), 3)",
    },
    Snippet {
        name: "scipy_optimize_stats",
        pure_python: false,
        setup: "import numpy as np\nfrom scipy import optimize, stats\nsample = np.random.default_rng(6).normal(size=50_000)",
        statement: "res = optimize.minimize(optimize.rosen, [1.3, 0.7, 0.8, 1.9, 1.2], method='Nelder-Mead', options={'maxiter': 2000})\n(round(float(res.fun), 4), round(float(stats.skew(sample)), 6))",
    },
    Snippet {
        name: "matplotlib_render_png",
        pure_python: false,
        setup: "import io, numpy as np, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\npoints = np.random.default_rng(7).random((2, 5000))",
        statement: "fig, ax = plt.subplots()\nax.scatter(points[0], points[1], s=2)\nax.set_title('scatter')\nbuf = io.BytesIO()\nfig.savefig(buf, format='png')\nplt.close(fig)\nbuf.getvalue()[:8]",
    },
];

/// Python that times `statement` (its last line an expression) where it
/// runs, compiled before the clock starts, and ends with the pair (repr of
/// its value, seconds taken).
fn timed(statement: &str) -> String {
    format!(
        "import time as _t\n\
         _head, _, _tail = ('\\n' + {statement:?}).rpartition('\\n')\n\
         _c1, _c2 = compile(_head, '<snippet>', 'exec'), compile(_tail, '<snippet>', 'eval')\n\
         _start = _t.perf_counter()\n\
         exec(_c1, globals())\n\
         _value = eval(_c2, globals())\n\
         _elapsed = _t.perf_counter() - _start\n\
         (repr(_value), _elapsed)"
    )
}

/// What the native interpreter runs: each stdin line is escaped source,
/// executed as a notebook cell (a final expression is its value), and
/// answered with the value's repr.
const NATIVE_CELLS: &str = "import ast, sys
ns = {}
for line in sys.stdin:
    tree = ast.parse(line.encode().decode('unicode_escape'))
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, '<cell>', 'exec'), ns)
    out = eval(compile(ast.Expression(last.value), '<cell>', 'eval'), ns) if last else None
    print(repr(out), flush=True)
";

/// A native interpreter that runs set-ups and timed statements on request.
struct Native {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Native {
    fn start() -> Option<Self> {
        let python = std::env::var("NATIVE_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut child = Command::new(&python)
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("OMP_NUM_THREADS", "1")
            .env("MKL_NUM_THREADS", "1")
            .args(["-u", "-c", NATIVE_CELLS])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| eprintln!("note: no native python ({python}): {e}"))
            .ok()?;
        let input = child.stdin.take()?;
        let output = BufReader::new(child.stdout.take()?);
        Some(Self {
            child,
            input,
            output,
        })
    }

    /// Runs `code`; for a timed statement, its (value repr, seconds).
    fn run(&mut self, code: &str) -> String {
        writeln!(self.input, "{}", code.escape_default()).unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Parses `"('value repr', seconds)"` as Python prints the pair.
fn value_and_seconds(text: &str) -> (String, Duration) {
    let (value, seconds) = text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .rsplit_once(", ")
        .unwrap_or_else(|| panic!("not a timed result: {text}"));
    let seconds: f64 = seconds.parse().unwrap_or_else(|_| panic!("{text}"));
    (value.to_owned(), Duration::from_secs_f64(seconds))
}

fn sandbox(rt: &tokio::runtime::Runtime, app: &App) -> Arc<Sandbox> {
    let request = CreateRequest {
        runtime: Some("scientific".into()),
        ..CreateRequest::default()
    };
    rt.block_on(app.manager.create(request)).unwrap().0
}

async fn sandbox_timed(sandbox: &Sandbox, statement: &str) -> (String, Duration) {
    let e = common::run_ok(sandbox, &timed(statement)).await;
    value_and_seconds(e.value.as_deref().unwrap_or_default())
}

/// Median of a snippet's timings on each side.
#[derive(Default)]
struct Medians {
    rows: Vec<(&'static str, bool, Duration, Duration, Duration)>,
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn analysis(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let flags = ["--pool-size", "0", "--runtime", "scientific"];
    let Some(default_app) = common::try_app(&rt, "analysis", &flags) else {
        return;
    };
    let fuel_flags = [&flags[..], &["--fuel", "5000000000000"]].concat();
    let fuel_app = common::app(&rt, "analysis-fuel", &fuel_flags);
    let plain = sandbox(&rt, &default_app);
    let metered = sandbox(&rt, &fuel_app);
    let Some(mut native) = Native::start() else {
        return;
    };
    let medians = Mutex::new(Medians::default());

    for snippet in SNIPPETS {
        rt.block_on(common::run_ok(&plain, snippet.setup));
        rt.block_on(common::run_ok(&metered, snippet.setup));
        native.run(snippet.setup);
        let (ours, _) = rt.block_on(sandbox_timed(&plain, snippet.statement));
        let (theirs, _) = value_and_seconds(&native.run(&timed(snippet.statement)));
        assert_eq!(
            ours, theirs,
            "{}: the sandbox and native Python disagree",
            snippet.name
        );

        let mut group = c.benchmark_group(format!("analysis/{}", snippet.name));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(6));
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        group.bench_function("sandbox", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let t = rt.block_on(sandbox_timed(&plain, snippet.statement)).1;
                        times[0].push(t);
                        t
                    })
                    .sum()
            })
        });
        group.bench_function("sandbox_fuel_on", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let t = rt.block_on(sandbox_timed(&metered, snippet.statement)).1;
                        times[1].push(t);
                        t
                    })
                    .sum()
            })
        });
        group.bench_function("native", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let t = value_and_seconds(&native.run(&timed(snippet.statement))).1;
                        times[2].push(t);
                        t
                    })
                    .sum()
            })
        });
        group.finish();
        let [plain_t, fuel_t, native_t] = times.map(median);
        medians.lock().unwrap().rows.push((
            snippet.name,
            snippet.pure_python,
            plain_t,
            fuel_t,
            native_t,
        ));
    }
    print_summary(&medians.lock().unwrap());
    rt.block_on(default_app.manager.close_all());
    rt.block_on(fuel_app.manager.close_all());
}

/// Each snippet's median times and ratios, then the geometric means.
fn print_summary(medians: &Medians) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    let geomean = |xs: &[f64]| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
    println!(
        "\nsnippet | sandbox ms | fuel on ms | native ms | sandbox / native | fuel on / native"
    );
    let (mut all, mut all_fuel, mut pure, mut pure_fuel) = (vec![], vec![], vec![], vec![]);
    for &(name, is_pure, plain, fuel, native) in &medians.rows {
        let (r, rf) = (ratio(plain, native), ratio(fuel, native));
        println!(
            "{name} | {:.1} | {:.1} | {:.1} | {r:.2}x | {rf:.2}x",
            plain.as_secs_f64() * 1e3,
            fuel.as_secs_f64() * 1e3,
            native.as_secs_f64() * 1e3,
        );
        all.push(r);
        all_fuel.push(rf);
        if is_pure {
            pure.push(r);
            pure_fuel.push(rf);
        }
    }
    println!(
        "geometric mean, all {}: {:.2}x (fuel on {:.2}x); plain Python {}: {:.2}x (fuel on {:.2}x)\n",
        all.len(),
        geomean(&all),
        geomean(&all_fuel),
        pure.len(),
        geomean(&pure),
        geomean(&pure_fuel),
    );
}

criterion_group!(benches, analysis);
criterion_main!(benches);
