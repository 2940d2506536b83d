//! The program every sandbox's CPython runs: the driver (`driver.py`, its
//! read-eval loop) and the guest modules it imports when the code needs them
//! (`guest/*.py`: IPython's syntax, shell, magics and display, pip through
//! the host's installer, `!python` lines in this interpreter, HTTP clients through the
//! door, threads and processes on one core,
//! POSIX user facts, the asyncio loop, installed versions of built-ins),
//! handed to the driver as sources in one dictionary ahead of its own code. One piece of text, so it is compiled
//! (or pre-initialised) once per runtime, and keys what depends on it.

use std::fmt::Write;
use std::sync::OnceLock;

/// The driver's read-eval loop.
const DRIVER: &str = include_str!("driver.py");

/// The guest modules, by the name the driver imports them as.
const MODULES: &[(&str, &str)] = &[
    ("_sandbox_notebook", include_str!("guest/notebook.py")),
    ("_sandbox_syntax", include_str!("guest/syntax.py")),
    ("_sandbox_shell", include_str!("guest/shell.py")),
    ("_sandbox_redirects", include_str!("guest/redirects.py")),
    ("_sandbox_cell_code", include_str!("guest/cell_code.py")),
    ("_sandbox_magics", include_str!("guest/magics.py")),
    (
        "_sandbox_shell_magics",
        include_str!("guest/shell_magics.py"),
    ),
    ("_sandbox_history", include_str!("guest/history.py")),
    ("_sandbox_timing", include_str!("guest/timing.py")),
    ("_sandbox_help", include_str!("guest/help.py")),
    ("_sandbox_autoreload", include_str!("guest/autoreload.py")),
    ("_sandbox_images", include_str!("guest/images.py")),
    ("_sandbox_values", include_str!("guest/values.py")),
    ("_sandbox_missing", include_str!("guest/missing_modules.py")),
    ("_sandbox_numpy_flags", include_str!("guest/numpy_flags.py")),
    ("_sandbox_display", include_str!("guest/display.py")),
    ("_sandbox_pretty", include_str!("guest/pretty.py")),
    ("_sandbox_ipython", include_str!("guest/ipython.py")),
    ("_sandbox_pip", include_str!("guest/pip_door.py")),
    ("_sandbox_http", include_str!("guest/http_door.py")),
    (
        "_sandbox_http_clients",
        include_str!("guest/http_clients.py"),
    ),
    ("_sandbox_ssl", include_str!("guest/ssl_shim.py")),
    ("_sandbox_threads", include_str!("guest/threads.py")),
    ("_sandbox_processes", include_str!("guest/processes.py")),
    ("_sandbox_python_cmd", include_str!("guest/python_cmd.py")),
    ("_sandbox_store", include_str!("guest/store.py")),
    ("_sandbox_posix", include_str!("guest/posix_user.py")),
    ("_sandbox_asyncio", include_str!("guest/asyncio_loop.py")),
    ("_sandbox_built_ins", include_str!("guest/built_ins.py")),
    ("_sandbox_url_parse", include_str!("guest/url_parse.py")),
];

/// The whole program: `_sandbox_sources = {...}` on its first line, then the
/// driver.
pub(crate) fn program() -> &'static str {
    static PROGRAM: OnceLock<String> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let mut text = String::from("_sandbox_sources = {");
        for (name, source) in MODULES {
            let _ = write!(text, "{}: {}, ", python_string(name), python_string(source));
        }
        text.push_str("}\n");
        text.push_str(DRIVER);
        text
    })
}

/// `text` as a Python string literal (double-quoted, one line).
fn python_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16 + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_python_literals_on_one_line() {
        assert_eq!(
            python_string("a\"b\\c\nd\te\x01é"),
            r#""a\"b\\c\nd\te\x01é""#
        );
    }

    #[test]
    fn the_program_holds_every_module_then_the_driver() {
        let program = program();
        let (first, rest) = program.split_once('\n').unwrap();
        assert!(first.starts_with("_sandbox_sources = {\"_sandbox_notebook\": \""));
        for (name, _) in MODULES {
            assert!(first.contains(&format!("\"{name}\": \"")), "{name}");
        }
        assert_eq!(rest, DRIVER);
    }
}
