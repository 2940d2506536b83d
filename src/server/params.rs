//! Arguments of the tools (the ten of the seed, and `fork_sandbox`). Field
//! docs become the schema the model reads; names are those of the seed, so its
//! clients and prompts keep working.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::sandbox::Encoding;

fn root() -> String {
    "/".to_owned()
}

/// A path argument that defaults to "/" when left out or sent as `null`
/// (as clients send optional arguments they have no value for).
fn path_or_root<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(root))
}

/// `create_sandbox` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CreateSandboxParams {
    /// Id for the new sandbox (1-64 letters, digits, '-', '_', '.'); generated
    /// when absent. If a sandbox with this id exists, it is reported as is.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Backend of the sandbox (the server describes the ones it has).
    #[serde(default)]
    pub backend: Option<String>,
    /// Default time limit of each execution in this sandbox, in seconds
    /// (within the server's maximum).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Memory limit of this sandbox's interpreter, in MiB (within the
    /// server's maximum).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Python runtime of the sandbox, by name (the server describes the ones
    /// it has); its default when absent.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Destinations the sandbox's code may reach over HTTP, as
    /// `scheme://host:port` patterns (`*.suffix` for any name under one);
    /// only a narrowing of the server's allowed hosts. Absent: the server's.
    #[serde(default)]
    pub allow_hosts: Option<Vec<String>>,
}

/// Arguments naming one sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionParams {
    /// The sandbox's id, as create_sandbox returned it.
    pub session_id: String,
}

/// `fork_sandbox` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ForkParams {
    /// The sandbox to copy.
    pub session_id: String,
    /// Id of the new sandbox (letters, digits, '-', '_'); generated when left out.
    #[serde(default)]
    pub new_session_id: Option<String>,
}

/// `get_sandbox_status` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct StatusParams {
    /// One sandbox's id; absent to report all sandboxes.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// `execute_code` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecuteCodeParams {
    /// The sandbox's id.
    pub session_id: String,
    /// Python source to run. State (variables, imports, functions) persists
    /// between calls; the value of a final expression is returned, as in a
    /// notebook cell.
    pub code: String,
    /// Time limit for this execution, in seconds (at most the server's
    /// maximum); the sandbox's default when absent.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

/// `create_run_close` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateRunCloseParams {
    /// Python source to run in a fresh sandbox that is closed afterwards.
    pub code: String,
    /// Time limit, in seconds.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Memory limit, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Backend of the sandbox (the server describes the ones it has).
    #[serde(default)]
    pub backend: Option<String>,
    /// Python runtime of the sandbox, by name (the server describes the ones
    /// it has); its default when absent.
    #[serde(default)]
    pub runtime: Option<String>,
}

/// `install_package` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct InstallPackageParams {
    /// The sandbox's id.
    pub session_id: String,
    /// What to install, as for pip: a name ("attrs"), with a version
    /// ("attrs==23.2.0", "python-dateutil>=2.8") or extras ("requests[socks]");
    /// several separated by spaces or commas.
    pub package_name: String,
}

/// `list_files` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListFilesParams {
    /// The sandbox's id.
    pub session_id: String,
    /// Directory to list, inside the sandbox ("/" is its root).
    #[serde(default = "root", deserialize_with = "path_or_root")]
    pub path: String,
}

/// `read_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFileParams {
    /// The sandbox's id.
    pub session_id: String,
    /// File to read, inside the sandbox ("/data.csv" or "data.csv").
    pub file_path: String,
    /// Byte to start at (default 0); a result that stops short of the end
    /// gives the `next_offset` to continue from.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most bytes to return (default: a 64 KiB page of a text file, or a whole
    /// binary file up to the server's file limit).
    #[serde(default)]
    pub length: Option<u64>,
}

/// `write_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFileParams {
    /// The sandbox's id.
    pub session_id: String,
    /// File to write, inside the sandbox; parent directories are created.
    pub file_path: String,
    /// The content: text, or base64 when `encoding` is "base64".
    pub content: String,
    /// "utf-8" (the default) or "base64" for binary content.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

/// `upload_file` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct UploadFileParams {
    /// The sandbox's id.
    pub session_id: String,
    /// Name of the file to create.
    pub file_name: String,
    /// The content: text, or base64 when `encoding` is "base64".
    pub file_content: String,
    /// Directory to put it in, inside the sandbox (default "/").
    #[serde(default = "root", deserialize_with = "path_or_root")]
    pub destination_path: String,
    /// "utf-8" (the default) or "base64" for binary content.
    #[serde(default)]
    pub encoding: Option<Encoding>,
}
