//! Bytecode written at install: each installed module comes with the
//! `.pyc` the sandbox's interpreter reads instead of compiling it, compiled
//! once per wheel and runtime and then copied from the host's cache; a
//! source edited in the sandbox is compiled again; nothing a guest writes
//! reaches another sandbox's bytecode.

use std::path::Path;

use crate::packages::install;
use crate::support::Server;
use crate::support::index::IndexServer;
use crate::wheels::Wheel;

/// Where the runtime's site-packages is, relative to a sandbox directory.
const SITE: &str = ".local/lib/python3.12/site-packages";
/// The python-3.12 runtime's bytecode tag.
const TAG: &str = "cpython-312";

/// A package of three modules, one of which does not compile.
fn package() -> Wheel {
    Wheel::module("quick", "1.0", "VALUE = 42\n")
        .file("quick/sub.py", "X = 1\n")
        .file("quick/broken.py", "def (:\n")
        .file("top_level.py", "TOP = 'top'\n")
}

/// The bytecode files under `site`, relative to it.
fn pycs(site: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![site.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "pyc") {
                found.push(path.strip_prefix(site).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn installed_modules_come_with_bytecode_the_interpreter_reads() {
    let index = IndexServer::start().await;
    index.add_wheel(&package());
    let server = Server::start_on_index(&index.url).await;
    let id = server.create().await;
    install(&server, &id, "quick").await;

    let site = server.sandbox_dirs()[0].join(SITE);
    assert_eq!(
        pycs(&site),
        [
            format!("__pycache__/top_level.{TAG}.pyc"),
            format!("quick/__pycache__/__init__.{TAG}.pyc"),
            format!("quick/__pycache__/sub.{TAG}.pyc"),
        ],
        "every module but the one that does not compile"
    );
    let record = std::fs::read_to_string(site.join("quick-1.0.dist-info/RECORD")).unwrap();
    assert!(
        record.contains(&format!("quick/__pycache__/sub.{TAG}.pyc,sha256=")),
        "RECORD lists the bytecode, as pip's does: {record}"
    );

    // The same bytes with another value, and the time the install gave the
    // source: only the bytecode can still say 42.
    let value = server
        .run(
            &id,
            "import os\n\
             p = '/.local/lib/python3.12/site-packages/quick/__init__.py'\n\
             st = os.stat(p)\n\
             open(p, 'w').write('VALUE = 17\\n')\n\
             os.utime(p, (st.st_mtime, st.st_mtime))\n\
             import quick\n\
             quick.VALUE",
        )
        .await;
    assert_eq!(
        value["value"], "42",
        "the import read the bytecode: {value}"
    );

    // An edit as anyone makes it (a new time): the source wins.
    let edited = server
        .run(
            &id,
            "p = '/.local/lib/python3.12/site-packages/quick/sub.py'\n\
             open(p, 'w').write('X = 2\\n')\n\
             import quick.sub, top_level\n\
             (quick.sub.X, top_level.TOP)",
        )
        .await;
    assert_eq!(edited["value"], "(2, 'top')", "{edited}");

    let broken = server.exec(&id, "import quick.broken").await;
    assert_eq!(broken.is_error, Some(true));
    assert!(
        crate::support::text(&broken).contains("SyntaxError"),
        "a module that does not compile fails as it would anywhere"
    );
    server.stop().await;
}

#[tokio::test]
async fn bytecode_is_compiled_once_per_wheel_and_a_guest_cannot_change_it() {
    let index = IndexServer::start().await;
    index.add_wheel(&package());
    let server = Server::start_on_index(&index.url).await;

    // A guest that plants its own bytecode where the package's goes, and
    // changes what it can before and after its install.
    let hostile = server.create().await;
    server
        .run(
            &hostile,
            "import os\n\
             d = '/.local/lib/python3.12/site-packages/quick/__pycache__'\n\
             os.makedirs(d)\n\
             open(d + '/__init__.cpython-312.pyc', 'wb').write(b'planted')\n\
             open('/.local/lib/python3.12/site-packages/quick/__init__.py', 'w').write('VALUE = -1\\n')",
        )
        .await;
    install(&server, &hostile, "quick").await;
    server
        .run(
            &hostile,
            "import glob\n\
             for p in glob.glob('/.local/lib/python3.12/site-packages/**/*.pyc', recursive=True):\n\
             \x20   open(p, 'wb').write(b'changed after')",
        )
        .await;

    let clean = server.create().await;
    install(&server, &clean, "quick").await;
    let value = server
        .run(
            &clean,
            "import quick, quick.sub\n(quick.VALUE, quick.sub.X)",
        )
        .await;
    assert_eq!(value["value"], "(42, 1)", "{value}");

    let dirs = server.sandbox_dirs();
    let clean_site = dirs
        .iter()
        .map(|d| d.join(SITE))
        .find(|site| {
            std::fs::read(site.join(format!("quick/__pycache__/sub.{TAG}.pyc")))
                .is_ok_and(|b| b != b"changed after")
        })
        .expect("the second sandbox has its own bytecode");
    let pyc =
        std::fs::read(clean_site.join(format!("quick/__pycache__/__init__.{TAG}.pyc"))).unwrap();
    assert_ne!(pyc, b"planted");
    assert!(pyc.len() > 16, "a real pyc: {} bytes", pyc.len());

    let logs = server.logs();
    assert_eq!(
        logs.matches("compiled the bytecode of newly fetched wheels")
            .count(),
        1,
        "compiled once, then copied from the host's cache: {logs}"
    );
    server.stop().await;
}

#[tokio::test]
async fn bytecode_another_package_left_on_the_same_path_never_passes_for_this_ones() {
    let index = IndexServer::start().await;
    // Two packages writing one module of the same size; the second one's
    // does not compile, so it comes with no bytecode of its own.
    index.add_wheel(&Wheel::module("first", "1.0", "").file("shared/mod.py", "X = 'p1'\n"));
    index.add_wheel(&Wheel::module("second", "1.0", "").file("shared/mod.py", "X = 'p2(\n"));
    // A wheel that ships its own bytecode for its module.
    index.add_wheel(
        &Wheel::module("shipper", "1.0", "WHAT = 'the source'\n").file(
            &format!("shipper/__pycache__/__init__.{TAG}.pyc"),
            "shipped bytes",
        ),
    );
    let server = Server::start_on_index(&index.url).await;
    let id = server.create().await;
    install(&server, &id, "first").await;
    install(&server, &id, "second").await;
    let stale = server.exec(&id, "import shared.mod").await;
    assert_eq!(
        stale.is_error,
        Some(true),
        "{}",
        crate::support::text(&stale)
    );
    assert!(
        crate::support::text(&stale).contains("SyntaxError"),
        "the source installed last is what is imported: {}",
        crate::support::text(&stale)
    );

    install(&server, &id, "shipper").await;
    let value = server.run(&id, "import shipper\nshipper.WHAT").await;
    assert_eq!(value["value"], "'the source'", "{value}");
    let site = server.sandbox_dirs()[0].join(SITE);
    let pyc = std::fs::read(site.join(format!("shipper/__pycache__/__init__.{TAG}.pyc"))).unwrap();
    assert_ne!(
        pyc, b"shipped bytes",
        "the compiled pyc replaced the shipped one"
    );
    server.stop().await;
}
