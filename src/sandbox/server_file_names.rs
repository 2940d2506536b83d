//! The names of the files the server writes into a sandbox on its own
//! account (the `server_files` module): where they go and what they are
//! called, for whatever must tell them from the sandbox's own files.

/// The directory of the files the server writes, in a sandbox's root.
pub const OUTPUT_DIR: &str = ".outputs";

/// Whether `name` (in `/.outputs/`) is one the server makes:
/// `exec-N-stdout.txt`, `exec-N-stderr.txt` or `exec-N-figure-K.png`.
pub fn is_server_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("exec-") else {
        return false;
    };
    let Some((number, kind)) = rest.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(number)
        && match kind {
            "stdout.txt" | "stderr.txt" => true,
            _ => kind
                .strip_prefix("figure-")
                .and_then(|k| k.strip_suffix(".png"))
                .is_some_and(digits),
        }
}
