//! The guest's door to the host (scientific runtime): a round trip through
//! `host.call` for a trivial frame (the tool list), a call of an upstream
//! MCP server's trivial tool (the tests' stdio fixture), and a 1 MiB GET from a
//! loopback server through the door with urllib and with requests (installed
//! with %pip from the pinned wheels), against the same GET from native
//! Python's urllib (and, for scale, with reqwest natively). Each is timed inside its interpreter (`perf_counter_ns`
//! around the loop), so start-up costs are left out of both sides. Skipped,
//! with a note, when the scientific runtime is not fetched.

mod common;

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::sandbox::manager::CreateRequest;

/// Bytes of the GET.
const SIZE: usize = 1 << 20;

/// A loopback server with `/1mb`; its origin.
fn serve(rt: &tokio::runtime::Runtime) -> String {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/1mb", get(|| async { vec![b'x'; SIZE] }));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    })
}

/// `url`'s body with reqwest, read chunk by chunk as the door reads it.
async fn fetch(client: &reqwest::Client, url: &str) -> usize {
    let mut response = client.get(url).send().await.unwrap();
    let mut body = Vec::with_capacity(SIZE);
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    body.len()
}

/// The same loop in native Python (`python3`), timed by it.
fn native_loop(setup: &str, body: &str, iters: u64) -> Option<Duration> {
    let code = format!(
        "{setup}\nimport time\n_t = time.perf_counter_ns()\nfor _ in range({iters}):\n    {body}\nprint(time.perf_counter_ns() - _t)"
    );
    let out = std::process::Command::new("python3")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .args(["-c", &code])
        .output()
        .ok()?;
    String::from_utf8(out.stdout)
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_nanos)
}

/// An upstreams file naming the tests' small stdio MCP server (its `add`).
fn upstreams_file() -> std::path::PathBuf {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/server.py");
    let path = std::env::temp_dir().join("mcp-code-sandbox-bench-upstreams.toml");
    let text = format!(
        "[[upstream]]\nname = \"fixture\"\ncommand = [\"python3\", {fixture:?}]\ntools = [\"add\"]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn door(c: &mut Criterion) {
    common::as_the_binary_starts();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = serve(&rt);
    let upstreams = upstreams_file();
    let wheels = common::notebook_wheels();
    let Some(app) = common::try_app(
        &rt,
        "door",
        &[
            "--wheelhouse",
            wheels.to_str().unwrap(),
            "--index-url",
            "none",
            "--pool-size",
            "0",
            "--runtime",
            "scientific",
            "--allow-hosts",
            &origin,
            "--allow-networks",
            "127.0.0.1/32",
            // Criterion's loops make far more calls than an execution may.
            "--door-max-calls",
            "4000000000",
            "--door-max-seconds",
            "86400",
            "--upstreams",
            upstreams.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let (sandbox, _) = rt
        .block_on(app.manager.create(CreateRequest::default()))
        .unwrap();
    let list = "import _host\n_f = b'{\"v\":1,\"id\":1,\"op\":\"list\"}'";
    let p50 = rt.block_on(common::run_ok(
        &sandbox,
        &format!(
            "{list}\nimport time, statistics\n_s = []\nfor _ in range(2000):\n    _t = time.perf_counter_ns(); _host.call(_f); _s.append(time.perf_counter_ns() - _t)\nstatistics.median(_s)"
        ),
    ));
    eprintln!(
        "door round trip p50 over 2000 calls: {} ns",
        p50.value.unwrap()
    );

    let mut group = c.benchmark_group("door");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("round_trip_list", |b| {
        b.iter_custom(|iters| common::guest_loop(&rt, &sandbox, list, "_host.call(_f)", iters))
    });
    group.bench_function("upstream_tool_call", |b| {
        b.iter_custom(|iters| {
            let setup = "from host import tools";
            common::guest_loop(&rt, &sandbox, setup, "tools.fixture_add(a=1, b=2)", iters)
        })
    });
    // For scale: the same GET with reqwest natively, the client the door uses.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{origin}/1mb");
    group.bench_function("get_1mb_reqwest_native", |b| {
        b.iter(|| rt.block_on(fetch(&client, &url)))
    });
    let setup = format!("import urllib.request\n_u = '{origin}/1mb'");
    let body = format!("assert len(urllib.request.urlopen(_u).read()) == {SIZE}");
    group.bench_function("get_1mb_guest", |b| {
        b.iter_custom(|iters| common::guest_loop(&rt, &sandbox, &setup, &body, iters))
    });
    if native_loop(&setup, &body, 1).is_some() {
        group.bench_function("get_1mb_native_python", |b| {
            b.iter_custom(|iters| native_loop(&setup, &body, iters).unwrap())
        });
    } else {
        eprintln!("note: no python3 here; the native baseline is skipped");
    }
    // The same GET with requests (installed from the pinned wheels through
    // %pip, as a notebook would), through the same door.
    rt.block_on(common::run_ok(
        &sandbox,
        "%pip install -q requests\nimport requests",
    ));
    let setup = format!("import requests\n_u = '{origin}/1mb'");
    let body = format!("assert len(requests.get(_u).content) == {SIZE}");
    group.bench_function("get_1mb_requests_guest", |b| {
        b.iter_custom(|iters| common::guest_loop(&rt, &sandbox, &setup, &body, iters))
    });
    // The two in turn, in one loop, so what the machine does meanwhile weighs
    // on both alike (each bench above runs at a moment of its own).
    let (with_requests, with_urllib) = interleaved(&rt, &sandbox, &origin, 300);
    eprintln!(
        "note: requests / urllib, in turn over 300 GETs each: {:.2} ({:.0} / {:.0} us)",
        with_requests / with_urllib,
        with_requests / 300e3,
        with_urllib / 300e3
    );
    group.finish();
    rt.block_on(app.manager.close_all());
}

/// Nanoseconds `pairs` GETs of `/1mb` took with requests and with urllib,
/// one of each in turn.
fn interleaved(
    rt: &tokio::runtime::Runtime,
    sandbox: &mcp_code_sandbox::sandbox::manager::Sandbox,
    origin: &str,
    pairs: u32,
) -> (f64, f64) {
    let code = format!(
        "import time, urllib.request, requests\n_u = '{origin}/1mb'\n_r = _l = 0\nfor _ in range({pairs}):\n    _t = time.perf_counter_ns()\n    requests.get(_u).content\n    _r += time.perf_counter_ns() - _t\n    _t = time.perf_counter_ns()\n    urllib.request.urlopen(_u).read()\n    _l += time.perf_counter_ns() - _t\nf'{{_r}} {{_l}}'"
    );
    let value = rt.block_on(common::run_ok(sandbox, &code)).value.unwrap();
    let mut times = value
        .trim_matches('\'')
        .split(' ')
        .map(|t| t.parse::<f64>().unwrap());
    (times.next().unwrap(), times.next().unwrap())
}

criterion_group!(benches, door);
criterion_main!(benches);
