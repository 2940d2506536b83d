//! The scientific runtime's own costs: creating a sandbox from its
//! pre-initialised snapshot, the first imports of its libraries in a fresh
//! sandbox (numpy, pandas and pyplot preloaded; scikit-learn not), a full
//! collection of the garbage collector in a fresh sandbox, forking a
//! sandbox with data loaded, and a small data analysis (group, fit, plot to
//! PNG) in a sandbox that has them imported. Skipped, with a note, when the runtime is
//! not fetched (`./fetch-python.sh --runtime scientific`).

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::sandbox::Execution;
use mcp_code_sandbox::sandbox::manager::{CreateRequest, Sandbox};

/// Set-up of the analysis: 100,000 rows in 10 groups.
const DATA: &str = "import numpy as np, pandas as pd\n\
from sklearn.linear_model import LinearRegression\n\
import matplotlib.pyplot as plt\n\
rng = np.random.default_rng(0)\n\
df = pd.DataFrame({'g': rng.integers(0, 10, 100_000), 'x': rng.random(100_000)})\n\
df['y'] = 3 * df.x + rng.normal(0, 0.1, len(df))";

/// A 200 MiB heap: every page of it written.
const HEAP_200_MIB: &str = "import numpy as np\nheap = np.ones(200 << 17)";

/// The analysis: aggregate, fit, and a plot returned as a PNG.
const ANALYSIS: &str = "summary = df.groupby('g').agg(x=('x', 'mean'), y=('y', 'sum'))\n\
model = LinearRegression().fit(df[['x']], df['y'])\n\
fig, ax = plt.subplots()\n\
ax.bar(summary.index, summary.y)\n\
plt.show()\n\
round(model.coef_[0], 1)";

fn app(rt: &tokio::runtime::Runtime) -> Option<App> {
    common::try_app(
        rt,
        "scientific",
        &["--pool-size", "0", "--runtime", "scientific"],
    )
}

async fn run(sandbox: &Sandbox, code: &str) -> Execution {
    common::run_ok(sandbox, code).await
}

/// Times `code` in a fresh sandbox each iteration (creation not timed).
fn fresh(rt: &tokio::runtime::Runtime, app: &App, code: &str, iters: u64) -> Duration {
    rt.block_on(async {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let (sandbox, _) = app.manager.create(CreateRequest::default()).await.unwrap();
            let started = Instant::now();
            run(&sandbox, code).await;
            total += started.elapsed();
            common::close(app, sandbox).await;
        }
        total
    })
}

/// Times creating a sandbox (no pool: from the pre-initialised snapshot).
fn create_cold(rt: &tokio::runtime::Runtime, app: &App, iters: u64) -> Duration {
    rt.block_on(async {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let started = Instant::now();
            let (sandbox, _) = app.manager.create(CreateRequest::default()).await.unwrap();
            total += started.elapsed();
            common::close(app, sandbox).await;
        }
        total
    })
}

/// Times forking `source` (closing each fork, untimed).
fn fork(rt: &tokio::runtime::Runtime, app: &App, source: &str, iters: u64) -> Duration {
    rt.block_on(async {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let started = Instant::now();
            let (fork, _) = app
                .manager
                .fork(&Default::default(), &Default::default(), source, None)
                .await
                .unwrap();
            total += started.elapsed();
            common::close(app, fork).await;
        }
        total
    })
}

fn scientific(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(app) = app(&rt) else { return };
    let mut group = c.benchmark_group("scientific");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("create_cold_from_snapshot", |b| {
        b.iter_custom(|iters| create_cold(&rt, &app, iters))
    });
    group.bench_function("first_import_numpy_pandas_pyplot", |b| {
        b.iter_custom(|iters| fresh(&rt, &app, "import numpy, pandas, matplotlib.pyplot", iters))
    });
    group.bench_function("first_import_pandas", |b| {
        b.iter_custom(|iters| fresh(&rt, &app, "import pandas", iters))
    });
    // A full collection in a new sandbox: the snapshot's objects are frozen
    // out of it, so it visits only what the sandbox made.
    group.bench_function("full_gc_collect_in_a_new_sandbox", |b| {
        b.iter_custom(|iters| fresh(&rt, &app, "import gc\ngc.collect()", iters))
    });
    group.bench_function("first_import_stack", |b| {
        b.iter_custom(|iters| {
            fresh(
                &rt,
                &app,
                "import numpy, pandas, sklearn.linear_model, matplotlib.pyplot",
                iters,
            )
        })
    });
    let (sandbox, _) = rt
        .block_on(app.manager.create(CreateRequest::default()))
        .unwrap();
    rt.block_on(run(&sandbox, DATA));
    group.bench_function("fork_with_data_loaded", |b| {
        b.iter_custom(|iters| fork(&rt, &app, sandbox.id(), iters))
    });
    // A fork costs what the source changed since its last flush, not its
    // size: a fresh sandbox and one holding a 200 MiB heap fork alike.
    let (fresh_source, _) = rt
        .block_on(app.manager.create(CreateRequest::default()))
        .unwrap();
    rt.block_on(run(&fresh_source, "1 + 1"));
    group.bench_function("fork_fresh", |b| {
        b.iter_custom(|iters| fork(&rt, &app, fresh_source.id(), iters))
    });
    let (big_source, _) = rt
        .block_on(app.manager.create(CreateRequest::default()))
        .unwrap();
    rt.block_on(run(&big_source, HEAP_200_MIB));
    group.bench_function("fork_200mib_heap", |b| {
        b.iter_custom(|iters| fork(&rt, &app, big_source.id(), iters))
    });
    group.bench_function("analysis_group_fit_plot", |b| {
        b.to_async(&rt).iter(|| async {
            let e = run(&sandbox, ANALYSIS).await;
            assert_eq!(e.images.len(), 1);
        })
    });
    group.finish();
    rt.block_on(app.manager.close_all());
}

criterion_group!(benches, scientific);
criterion_main!(benches);
