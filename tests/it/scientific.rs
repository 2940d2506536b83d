//! The scientific runtime (CPython 3.15 with numpy, pandas, scipy,
//! scikit-learn and matplotlib): a data analysis end to end, plots as
//! images, the limits, files, packages, the warm pool, and what a first
//! start says while it compiles.

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::index::IndexServer;
use crate::support::{
    Server, binary, progress_client, scientific_cache, structured, text, with_progress,
};
use crate::wheels::Wheel;

/// A server whose sandboxes are created with `runtime: "scientific"`.
async fn start(env: &[(&str, &str)]) -> Server {
    scientific_cache();
    let mut env = env.to_vec();
    env.push(("SANDBOX_POOL_SIZE", "0"));
    Server::start_with(&env).await
}

async fn create(server: &Server, args: Value) -> String {
    let mut args = args;
    args["runtime"] = json!("scientific");
    server.create_with(args).await
}

/// Runs code with a generous timeout (the first imports of the big
/// libraries take seconds); returns the whole result.
async fn exec(server: &Server, id: &str, code: &str) -> rmcp::model::CallToolResult {
    server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 240}),
        )
        .await
}

/// Runs code that must succeed; returns the structured result.
async fn run(server: &Server, id: &str, code: &str) -> Value {
    let result = exec(server, id, code).await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    structured(&result)
}

/// The PNG images of a result: their bytes, after checking the MIME type.
fn pngs(result: &rmcp::model::CallToolResult) -> Vec<Vec<u8>> {
    result
        .content
        .iter()
        .filter_map(|c| c.as_image())
        .map(|image| {
            assert_eq!(image.mime_type, "image/png");
            base64::engine::general_purpose::STANDARD
                .decode(&image.data)
                .expect("image data is base64")
        })
        .collect()
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 33, "a PNG is longer than its header");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR", "the first chunk is IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    (width, height)
}

#[tokio::test]
async fn a_small_data_analysis_comes_back_with_its_numbers_and_a_plot() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;

    // Two regions over twelve months: north sells 10 * month units at 2.0,
    // south 10 * month + 5 at 3.0.
    let mut csv = String::from("region,month,units,price\n");
    for month in 1..=12 {
        csv.push_str(&format!("north,{month},{},2.0\n", 10 * month));
        csv.push_str(&format!("south,{month},{},3.0\n", 10 * month + 5));
    }
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "data/sales.csv", "content": csv}),
        )
        .await;

    let summary = run(
        &server,
        &id,
        "import pandas as pd\n\
         df = pd.read_csv('data/sales.csv')\n\
         df['revenue'] = df.units * df.price\n\
         summary = df.groupby('region').agg(units=('units', 'sum'), revenue=('revenue', 'sum'))\n\
         summary",
    )
    .await;
    let table = summary["value"].as_str().unwrap();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec!["north", "780", "1560.0"]),
        "north: 780 units, 1560 revenue in\n{table}"
    );
    assert!(
        rows.contains(&vec!["south", "840", "2520.0"]),
        "south: 840 units, 2520 revenue in\n{table}"
    );

    let fit = run(
        &server,
        &id,
        "from sklearn.linear_model import LinearRegression\n\
         north = df[df.region == 'north']\n\
         model = LinearRegression().fit(north[['month']], north['units'])\n\
         print(f'slope={model.coef_[0]:.3f} intercept={model.intercept_:.3f}')\n\
         round(model.score(north[['month']], north['units']), 6)",
    )
    .await;
    assert_eq!(
        fit["stdout"]["text"], "slope=10.000 intercept=0.000\n",
        "{fit}"
    );
    assert_eq!(fit["value"], "1.0");

    let plotted = exec(
        &server,
        &id,
        "import matplotlib.pyplot as plt\n\
         fig, ax = plt.subplots(figsize=(6, 4))\n\
         for region, rows in df.groupby('region'):\n    ax.plot(rows.month, rows.units, marker='o', label=region)\n\
         ax.set_xlabel('month'); ax.set_ylabel('units'); ax.legend()\n\
         plt.show()",
    )
    .await;
    assert_ne!(plotted.is_error, Some(true), "{}", text(&plotted));
    let images = pngs(&plotted);
    assert_eq!(images.len(), 1, "one figure, one image: {}", text(&plotted));
    let (width, height) = png_size(&images[0]);
    assert!(
        (300..3000).contains(&width) && (200..2000).contains(&height),
        "a 6x4 inch figure: {width}x{height}"
    );
    let result = structured(&plotted);
    assert_eq!(
        result["stderr"]["text"], "",
        "plt.show() neither warns nor complains"
    );
    assert_eq!(result["images"][0]["mime_type"], "image/png");
    assert!(
        result["images"][0].get("path").is_none(),
        "a small plot is not saved"
    );

    let again = exec(&server, &id, "int(summary.loc['south', 'units'])").await;
    assert_eq!(structured(&again)["value"], "840", "state persists");
    assert!(pngs(&again).is_empty(), "a shown figure is not sent twice");
    server.stop().await;
}

#[tokio::test]
async fn the_runtime_is_chosen_per_sandbox_and_shown_in_status() {
    let server = start(&[]).await;
    let sci = create(&server, json!({"session_id": "sci"})).await;
    let plain = server.create_with(json!({"session_id": "plain"})).await;
    let status = server
        .ok("get_sandbox_status", json!({"session_id": sci}))
        .await;
    assert_eq!(status["sandboxes"][0]["runtime"], "scientific");
    let status = server
        .ok("get_sandbox_status", json!({"session_id": plain}))
        .await;
    assert_eq!(status["sandboxes"][0]["runtime"], "python-3.12");

    let version = run(&server, &sci, "import sys\nsys.version_info[:2]").await;
    assert_eq!(version["value"], "(3, 15)");
    let markers = run(
        &server,
        &sci,
        "import sys, os, platform\n(sys.platform, platform.system(), platform.machine(), os.name, sys.implementation.name, platform.python_implementation(), platform.release())",
    )
    .await;
    assert_eq!(
        markers["value"], "('wasi', 'wasi', 'wasm32', 'posix', 'cpython', 'CPython', '0.0.0')",
        "src/packages/environment.rs must match this runtime too"
    );

    let err = server
        .err("create_sandbox", json!({"runtime": "python-9"}))
        .await;
    assert!(
        err.contains("unknown runtime 'python-9'")
            && err.contains("python-3.12")
            && err.contains("scientific"),
        "{err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_snapshots_objects_sit_out_of_collections_and_the_users_cycles_are_still_collected() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;
    // The preloaded libraries' objects are frozen in the snapshot: a full
    // collection no longer visits (and writes to) each of them.
    let frozen = run(&server, &id, "import gc\ngc.get_freeze_count()").await;
    let frozen: u64 = frozen["value"].as_str().unwrap().parse().unwrap();
    assert!(frozen > 50_000, "objects frozen in the snapshot: {frozen}");
    let collected = run(
        &server,
        &id,
        "import weakref\nclass Node: pass\na, b = Node(), Node()\na.peer, b.peer = b, a\nprobe = weakref.ref(a)\ndel a, b\n(gc.collect() >= 2, probe() is None)",
    )
    .await;
    assert_eq!(collected["value"], "(True, True)");
    let after = run(
        &server,
        &id,
        "import pandas as pd\ngc.collect()\nint(pd.DataFrame({'a': [1, 2]}).a.sum())",
    )
    .await;
    assert_eq!(after["value"], "3");
    server.stop().await;
}

#[tokio::test]
async fn a_wide_data_frame_comes_back_as_one_readable_table() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;
    let result = run(
        &server,
        &id,
        "import pandas as pd\n\
         pd.DataFrame({f'column_{i}': range(i, i + 5) for i in range(18)})",
    )
    .await;
    let table = result["value"].as_str().unwrap();
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("column_0") && header.contains("column_17"),
        "every column on the header line:\n{table}"
    );
    assert_eq!(table.lines().count(), 6, "a header and five rows:\n{table}");
    assert!(!table.contains('\\'), "no wrapped column blocks:\n{table}");
    server.stop().await;
}

#[tokio::test]
async fn plots_over_the_budget_are_downscaled_and_saved_and_extra_ones_only_saved() {
    let server = start(&[
        ("SANDBOX_IMAGE_LIMIT_BYTES", "60000"),
        ("SANDBOX_MAX_IMAGES", "2"),
    ])
    .await;
    let id = create(&server, json!({})).await;
    let result = exec(
        &server,
        &id,
        "import numpy as np\n\
         import matplotlib.pyplot as plt\n\
         rng = np.random.default_rng(0)\n\
         plt.figure(); plt.plot([1, 2, 3])\n\
         plt.figure(); plt.imshow(rng.random((300, 300)))\n\
         plt.figure(); plt.plot([3, 2, 1])",
    )
    .await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let images = pngs(&result);
    assert_eq!(images.len(), 2, "{}", text(&result));
    assert!(images.iter().all(|png| png.len() <= 60000));
    let full = structured(&result);
    let saved = full["images"][1]["path"]
        .as_str()
        .expect("the downscaled plot names its full-size file");
    assert!(full["images"][0].get("path").is_none());
    let stderr = full["stderr"]["text"].as_str().unwrap();
    assert!(
        stderr.contains("downscaled") && stderr.contains(saved),
        "{stderr}"
    );
    assert!(
        stderr.contains("at most 2 images"),
        "the third plot is saved, not returned: {stderr}"
    );

    let file = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": saved, "length": 4 << 20}),
        )
        .await;
    assert_eq!(file["encoding"], "base64");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(file["content"].as_str().unwrap())
        .unwrap();
    assert!(bytes.len() > 60000, "the saved file is the full-size plot");
    let (small_width, _) = png_size(&images[1]);
    let (full_width, _) = png_size(&bytes);
    assert!(small_width < full_width, "{small_width} < {full_width}");
    server.stop().await;
}

#[tokio::test]
async fn a_figure_as_the_last_expression_or_displayed_comes_back_once() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;
    let result = exec(
        &server,
        &id,
        "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 4, 9])\nfig",
    )
    .await;
    assert_eq!(pngs(&result).len(), 1, "{}", text(&result));
    let result = exec(
        &server,
        &id,
        "from matplotlib.figure import Figure\nf = Figure()\nf.add_subplot().bar([1, 2], [3, 4])\ndisplay(f)",
    )
    .await;
    assert_eq!(pngs(&result).len(), 1, "{}", text(&result));
    server.stop().await;
}

#[tokio::test]
async fn every_limit_holds_in_the_scientific_runtime() {
    let server = start(&[("SANDBOX_DISK_QUOTA_MB", "8")]).await;
    let id = create(&server, json!({"memory_mb": 256})).await;
    run(&server, &id, "import numpy as np\nkept = 42").await;

    let memory = exec(&server, &id, "big = np.ones(100_000_000)").await;
    assert_eq!(memory.is_error, Some(true));
    let memory = structured(&memory);
    assert_eq!(memory["limit"]["kind"], "memory", "{memory}");
    assert!(memory.get("state_lost").is_none());
    assert_eq!(run(&server, &id, "kept").await["value"], "42");

    let disk = exec(
        &server,
        &id,
        "open('big.bin', 'wb').write(b'x' * (16 << 20))",
    )
    .await;
    let disk = structured(&disk);
    assert_eq!(disk["limit"]["kind"], "disk", "{disk}");
    assert!(
        disk["error"]["value"]
            .as_str()
            .unwrap()
            .contains("Quota exceeded"),
        "{disk}"
    );

    let output = structured(&exec(&server, &id, "print('y' * (2 << 20))").await);
    assert_eq!(output["limit"]["kind"], "output", "{output}");
    assert_eq!(output["stdout"]["truncated"], true);

    let timeout = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "while True: pass", "timeout_seconds": 2}),
        )
        .await;
    let timeout = structured(&timeout);
    assert_eq!(timeout["limit"]["kind"], "timeout", "{timeout}");
    assert!(timeout["state_lost"].is_string());
    let after = run(&server, &id, "import numpy\n'kept' in globals()").await;
    assert_eq!(after["value"], "False", "a fresh interpreter, same files");
    server.stop().await;

    let server = start(&[("SANDBOX_FUEL", "3000000000")]).await;
    let id = create(&server, json!({})).await;
    let fuel = structured(&exec(&server, &id, "while True: pass").await);
    assert_eq!(fuel["limit"]["kind"], "fuel", "{fuel}");
    server.stop().await;

    let server = start(&[("SANDBOX_CPU_SECONDS", "0.5")]).await;
    let id = create(&server, json!({})).await;
    let slept = run(&server, &id, "import time\ntime.sleep(1)\n'awake'").await;
    assert_eq!(slept["value"], "'awake'", "{slept}");
    let cpu = structured(&exec(&server, &id, "while True: pass").await);
    assert_eq!(cpu["limit"]["kind"], "cpu", "{cpu}");
    assert!(cpu["usage"]["fuel"].is_null(), "{cpu}");
    let after = run(&server, &id, "import numpy\nint(numpy.arange(3).sum())").await;
    assert_eq!(after["value"], "3", "{after}");
    server.stop().await;
}

#[tokio::test]
async fn files_and_packages_work_as_in_the_default_runtime() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module(
            "tinystats",
            "1.0",
            "import numpy\ndef mean(xs):\n    return float(numpy.mean(xs))\n",
        )
        .requires("numpy>=2"),
    );
    index.add_wheel(&Wheel::module("oldstats", "1.0", "").requires("numpy<2"));
    let server = start(&[
        ("SANDBOX_INDEX_URL", index.url.as_str()),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ])
    .await;
    let id = create(&server, json!({})).await;

    run(
        &server,
        &id,
        "import os\nimport pandas as pd\nos.makedirs('out', exist_ok=True)\npd.DataFrame({'a': [1, 2]}).to_csv('out/table.csv', index=False)",
    )
    .await;
    let listing = server
        .ok("list_files", json!({"session_id": id, "path": "/out"}))
        .await;
    assert_eq!(listing["files"][0]["name"], "table.csv");
    let file = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "out/table.csv"}),
        )
        .await;
    assert_eq!(file["content"], "a\n1\n2\n");

    let installed = server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": "tinystats pandas"}),
        )
        .await;
    assert_eq!(installed["installed"][0]["name"], "tinystats");
    let present = installed["already_present"].as_array().unwrap();
    for name in ["numpy", "pandas"] {
        let p = present
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is present: {installed}"));
        assert_eq!(p["source"], "runtime");
    }
    assert!(
        installed["message"]
            .as_str()
            .unwrap()
            .contains("(built into the runtime)"),
        "{installed}"
    );
    let used = run(
        &server,
        &id,
        "import tinystats\ntinystats.mean([1, 2, 3, 6])",
    )
    .await;
    assert_eq!(used["value"], "3.0");
    assert!(
        server.sandbox_dirs().iter().any(|d| d
            .join(".local/lib/python3.15/site-packages/tinystats")
            .is_dir()),
        "installed for Python 3.15"
    );

    let refused = server
        .err(
            "install_package",
            json!({"session_id": id, "package_name": "oldstats"}),
        )
        .await;
    assert!(
        refused.contains("built into this sandbox's runtime") && refused.contains("numpy<2"),
        "{refused}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_warm_pool_serves_a_scientific_default() {
    scientific_cache();
    let server = Server::start_with(&[
        ("SANDBOX_RUNTIME", "scientific"),
        ("SANDBOX_POOL_SIZE", "1"),
    ])
    .await;
    for _ in 0..2 {
        let id = server.create().await;
        let status = server
            .ok("get_sandbox_status", json!({"session_id": id}))
            .await;
        assert_eq!(status["sandboxes"][0]["runtime"], "scientific");
        let r = run(&server, &id, "import sys\nsys.version_info.minor").await;
        assert_eq!(r["value"], "15");
    }
    let plain = server.create_with(json!({"runtime": "python-3.12"})).await;
    let r = run(&server, &plain, "import sys\nsys.version_info.minor").await;
    assert_eq!(r["value"], "12");
    server.stop().await;
}

/// A runtime directory holding the 3.12 module (small: it compiles in
/// seconds) and, when given, one more manifest.
fn runtime_dir(extra: Option<(&str, String)>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/python-3.12.0.wasm");
    std::fs::copy(&module, dir.path().join("python-3.12.0.wasm"))
        .expect("run ./fetch-python.sh first");
    if let Some((name, text)) = extra {
        std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
    }
    dir
}

#[tokio::test]
async fn a_first_compile_reports_progress_instead_of_looking_hung() {
    let runtimes = runtime_dir(None);
    let cache = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    let (client, log) = progress_client(&[
        ("HOME", home.path().as_os_str()),
        ("SANDBOX_CACHE_DIR", cache.path().as_os_str()),
        ("SANDBOX_RUNTIME_DIR", runtimes.path().as_os_str()),
        ("SANDBOX_ROOT", root.as_os_str()),
        ("SANDBOX_RUNTIME", "python-3.12".as_ref()),
        ("SANDBOX_POOL_SIZE", "0".as_ref()),
        ("SANDBOX_LOG", "warn".as_ref()),
    ])
    .await;
    let created = client
        .call_tool(with_progress("create_sandbox", json!({}), "create-1"))
        .await
        .unwrap();
    assert_ne!(created.is_error, Some(true), "{}", text(&created));
    let messages = log.messages();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("compiling the runtime 'python-3.12'") && m.contains("so far")),
        "{messages:?}"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_machine_short_of_memory_is_refused_with_the_figure() {
    let manifest = format!(
        "{}\ncompile_memory_mb = 99999999\n",
        include_str!("../../runtime/python-3.12.toml")
            .replace("name = \"python-3.12\"", "name = \"greedy\"")
    );
    let runtimes = runtime_dir(Some(("greedy", manifest)));
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start_with(&[
        ("SANDBOX_RUNTIME_DIR", runtimes.path().to_str().unwrap()),
        ("SANDBOX_CACHE_DIR", cache.path().to_str().unwrap()),
        ("SANDBOX_RUNTIME", "greedy"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let err = server.err("create_sandbox", json!({})).await;
    assert!(
        err.contains("compiling the runtime 'greedy' needs about 99999999 MiB")
            && err.contains("MiB available")
            && err.contains("MemAvailable"),
        "{err}"
    );
    // (The runtime's file was checked and its sha256 recorded: that is all.)
    assert!(
        std::fs::read_dir(cache.path().join("modules"))
            .map(|d| d
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().ends_with(".cwasm")))
            .unwrap_or(true),
        "nothing was compiled"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_wheelhouse_for_the_scientific_runtime_leaves_out_what_it_carries() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("tinyplot", "1.0", "").requires("matplotlib>=3"));
    let tmp = tempfile::tempdir().unwrap();
    let house = tmp.path().join("house");
    let out = tokio::process::Command::new(binary())
        .args([
            "--runtime",
            "scientific",
            "wheelhouse",
            "add",
            "tinyplot",
            "--dir",
        ])
        .arg(&house)
        .env_clear()
        .env("HOME", tmp.path())
        .env("SANDBOX_CACHE_DIR", tmp.path().join("cache"))
        .env("SANDBOX_ROOT", tmp.path().join("root"))
        .env("SANDBOX_INDEX_URL", &index.url)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("SANDBOX_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("added  tinyplot-1.0-py3-none-any.whl") && stdout.contains("1 wheel(s)"),
        "matplotlib is built in, so only tinyplot is added: {stdout}"
    );
}

/// A typical data-analysis session on a 20k-row table is sized for a model:
/// under 64 KiB of text and structured content in all, a 660 KB print keeps
/// its head and tail, and nothing is lost: the whole print can be paged
/// through with read_file.
#[tokio::test]
async fn a_data_analysis_session_returns_model_sized_results_and_loses_nothing() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;
    let mut bytes = 0usize;
    let mut count = |result: &rmcp::model::CallToolResult| {
        bytes += text(result).len()
            + serde_json::to_string(&result.structured_content)
                .unwrap()
                .len();
    };
    let steps = [
        "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\nn = 20_000\npd.DataFrame({'id': range(n), 'city': rng.choice(['Lisbon', 'Oslo', 'Lima', 'Pune'], n), 'x': rng.normal(size=n).round(4), 'y': rng.integers(0, 100, n)}).to_csv('data.csv', index=False)",
        "df = pd.read_csv('data.csv')\ndf.head()",
        "df.describe()",
        "df.groupby('city').agg(['mean', 'count'])",
        "print(df.to_string())",
        "import matplotlib.pyplot as plt\ndf.groupby('city')['x'].mean().plot.bar()\nplt.show()",
    ];
    let mut printed = Value::Null;
    for code in steps {
        let result = exec(&server, &id, code).await;
        assert_ne!(result.is_error, Some(true), "{}", text(&result));
        count(&result);
        if code.starts_with("print") {
            printed = structured(&result)["stdout"].clone();
        }
    }
    assert!(bytes < 64 << 10, "{bytes} bytes reached the model");
    let total = printed["total_bytes"].as_u64().unwrap();
    assert!(total > 600_000, "{total}");
    let shown = printed["text"].as_str().unwrap();
    assert!(shown.contains("bytes left out"), "{shown}");
    let last_line = shown.trim_end().lines().last().unwrap();
    assert!(
        last_line.trim_start().starts_with("19999"),
        "the tail is kept: {last_line}"
    );
    let path = printed["full_output_path"].as_str().unwrap();
    let (mut offset, mut whole) = (0u64, 0u64);
    while let Some(next) = {
        let page = server
            .ok(
                "read_file",
                json!({"session_id": id, "file_path": path, "offset": offset}),
            )
            .await;
        whole += page["length"].as_u64().unwrap();
        page["next_offset"].as_u64()
    } {
        offset = next;
    }
    assert_eq!(whole, total, "every byte of the print can be read");
    server.stop().await;
}

/// A pure-Python built-in (attrs, pyparsing, which the snapshot has
/// imported already) gives way to the version asked for, in that sandbox
/// only: its code and its metadata are the installed copy's. One with
/// compiled parts (numpy) stays, even when the index offers a pure wheel.
#[tokio::test]
async fn a_pure_built_in_gives_way_to_the_version_asked_for_and_a_compiled_one_stays() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::new("attrs", "23.2.0")
            .file("attr/__init__.py", "__version__ = '23.2.0'\n")
            .file("attrs/__init__.py", "from attr import __version__\n"),
    );
    index.add_wheel(&Wheel::module(
        "pyparsing",
        "3.1.4",
        "__version__ = '3.1.4'\n",
    ));
    index.add_wheel(&Wheel::module(
        "numpy",
        "1.26.0",
        "__version__ = '1.26.0'\n",
    ));
    let server = start(&[
        ("SANDBOX_INDEX_URL", index.url.as_str()),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ])
    .await;
    let id = create(&server, json!({})).await;
    let before = run(&server, &id, "import pyparsing\npyparsing.__version__").await;
    assert_eq!(before["value"], "'3.3.3'", "{before}");

    let result = server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": "attrs==23.2.0 pyparsing==3.1.4"}),
        )
        .await;
    let replaced: Vec<String> = result["installed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {} {}", p["name"], p["version"], p["replaces_built_in"]))
        .collect();
    assert_eq!(
        replaced,
        [
            r#""attrs" "23.2.0" "26.1.0""#,
            r#""pyparsing" "3.1.4" "3.3.3""#
        ],
        "{result}"
    );
    assert!(result.get("import_failures").is_none(), "{result}");
    let versions = "import attr, attrs, pyparsing, importlib.metadata as m\n\
        (attr.__version__, attrs.__version__, pyparsing.__version__, m.version('attrs'), m.version('pyparsing'))";
    let after = run(&server, &id, versions).await;
    assert_eq!(
        after["value"], "('23.2.0', '23.2.0', '3.1.4', '23.2.0', '3.1.4')",
        "{after}"
    );
    // What imported the built-in before still works, and numpy is the runtime's.
    let plot = exec(
        &server,
        &id,
        "import numpy, matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nnumpy.__version__",
    )
    .await;
    assert_ne!(plot.is_error, Some(true), "{}", text(&plot));
    assert_eq!(pngs(&plot).len(), 1);
    assert_eq!(structured(&plot)["value"], "'2.5.2'");

    let err = server
        .err(
            "install_package",
            json!({"session_id": id, "package_name": "numpy==1.26.0"}),
        )
        .await;
    assert!(
        err.contains("numpy 2.5.2 is built into this sandbox's runtime and cannot be replaced"),
        "{err}"
    );
    // Another sandbox keeps the built-ins.
    let other = create(&server, json!({})).await;
    let theirs = run(
        &server,
        &other,
        "import attr, pyparsing\n(attr.__version__, pyparsing.__version__)",
    )
    .await;
    assert_eq!(theirs["value"], "('26.1.0', '3.3.3')", "{theirs}");
    server.stop().await;
}

/// The runtime manifest's list of built-ins with compiled parts covers
/// every package whose modules are linked into the interpreter.
#[tokio::test]
async fn every_package_with_compiled_modules_is_listed_as_compiled() {
    let server = start(&[]).await;
    let id = create(&server, json!({})).await;
    let found = run(
        &server,
        &id,
        "import sys\nsorted({n.partition('.')[0] for n in sys.builtin_module_names if '.' in n} - {'_cython_3_3_0'})",
    )
    .await;
    server.stop().await;
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string("runtime/scientific.toml").unwrap()).unwrap();
    let listed: Vec<String> = manifest["artifact"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.get("compiled_distributions"))
        .flat_map(|l| l.as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    // Import names that are not their distribution's name.
    let distribution_of = |module: &str| match module {
        "PIL" => "pillow".to_owned(),
        "sklearn" => "scikit-learn".to_owned(),
        other => other.to_lowercase(),
    };
    let modules: Vec<String> =
        serde_json::from_str(&found["value"].as_str().unwrap().replace('\'', "\"")).unwrap();
    assert!(!modules.is_empty());
    for module in modules {
        let dist = distribution_of(&module);
        assert!(
            listed.contains(&dist),
            "{module} ({dist}) has compiled modules: list it"
        );
    }
}
