//! envd's side of the fake: `/files` and the `filesystem.Filesystem` RPCs
//! over the directory standing in for a sandbox VM's `/`.

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::*;

/// The host path for a VM path (relative paths are under /home/user).
fn resolve(root: &Path, vm: &str) -> Option<(PathBuf, String)> {
    let absolute = if vm.starts_with('/') {
        vm.to_owned()
    } else if vm == "~" || vm.is_empty() {
        "/home/user".to_owned()
    } else if let Some(rest) = vm.strip_prefix("~/") {
        format!("/home/user/{rest}")
    } else {
        format!("/home/user/{vm}")
    };
    let mut parts: Vec<String> = Vec::new();
    for c in Path::new(&absolute).components() {
        match c {
            Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    let mut host = root.to_path_buf();
    for p in &parts {
        host.push(p);
    }
    Some((host, format!("/{}", parts.join("/"))))
}

fn envd_error(status: StatusCode, message: String) -> Response {
    (
        status,
        [("content-type", "application/json; charset=utf-8")],
        json!({"code": status.as_u16(), "message": message}).to_string(),
    )
        .into_response()
}

pub(super) fn read_file(root: &Path, path: Option<&str>) -> Response {
    let Some((host, vm)) = resolve(root, path.unwrap_or("")) else {
        return envd_error(StatusCode::BAD_REQUEST, "invalid path".into());
    };
    if host.is_dir() {
        return envd_error(
            StatusCode::BAD_REQUEST,
            format!("path '{vm}' is a directory"),
        );
    }
    match std::fs::read(&host) {
        Ok(bytes) => (
            StatusCode::OK,
            [("content-type", "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(_) => envd_error(StatusCode::NOT_FOUND, format!("path '{vm}' does not exist")),
    }
}

pub(super) async fn write_file(root: &Path, path: Option<String>, request: Request) -> Response {
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if content_type.starts_with("multipart/form-data") {
        let Ok(mut multipart) = Multipart::from_request(request, &()).await else {
            return envd_error(StatusCode::BAD_REQUEST, "bad multipart body".into());
        };
        while let Ok(Some(field)) = multipart.next_field().await {
            if field.name() != Some("file") {
                continue;
            }
            let name = field.file_name().map(str::to_owned);
            let Ok(data) = field.bytes().await else {
                return envd_error(StatusCode::BAD_REQUEST, "bad multipart part".into());
            };
            match path.clone().or(name) {
                Some(target) => files.push((target, data.to_vec())),
                None => return envd_error(StatusCode::BAD_REQUEST, "no path".into()),
            }
        }
    } else {
        return envd_error(StatusCode::BAD_REQUEST, "unsupported content type".into());
    }
    let mut written = Vec::new();
    for (target, data) in files {
        let Some((host, vm)) = resolve(root, &target) else {
            return envd_error(StatusCode::BAD_REQUEST, "invalid path".into());
        };
        if host.is_dir() {
            return envd_error(
                StatusCode::BAD_REQUEST,
                format!("path '{vm}' is a directory"),
            );
        }
        if let Some(parent) = host.parent()
            && std::fs::create_dir_all(parent).is_err()
        {
            // envd's answer when a file is where a directory should be.
            return envd_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error ensuring directories: path is a file".into(),
            );
        }
        if let Err(e) = std::fs::write(&host, &data) {
            return envd_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
        let name = vm.rsplit('/').next().unwrap_or_default().to_owned();
        written.push(json!({"path": vm, "name": name, "type": "file"}));
    }
    // envd sets no Content-Type on success.
    let mut response = Response::new(Body::from(Value::Array(written).to_string()));
    response.headers_mut().remove("content-type");
    response
}

fn entry_info(host: &Path, vm: &str) -> Option<Value> {
    use std::os::unix::fs::PermissionsExt;
    let link = std::fs::symlink_metadata(host).ok()?;
    let meta = std::fs::metadata(host).unwrap_or(link.clone());
    let kind = if meta.is_dir() {
        "FILE_TYPE_DIRECTORY"
    } else {
        "FILE_TYPE_FILE"
    };
    let mode = meta.permissions().mode() & 0o777;
    let mut entry = json!({
        "name": vm.rsplit('/').next().unwrap_or_default(),
        "type": kind,
        "path": vm,
        "mode": mode,
        "permissions": format!("{}{:o}", if meta.is_dir() { "d" } else { "-" }, mode),
        "owner": "user",
        "group": "user",
        "modifiedTime": rfc3339(meta.modified().ok()?),
    });
    if meta.len() > 0 {
        entry["size"] = json!(meta.len().to_string());
    }
    if link.file_type().is_symlink() {
        entry["symlinkTarget"] = json!(std::fs::read_link(host).ok()?.to_string_lossy());
    }
    Some(entry)
}

fn connect_error(status: StatusCode, code: &str, message: String) -> Response {
    json_response(status, json!({"code": code, "message": message}))
}

pub(super) fn filesystem(root: &Path, method: &str, body: &Value) -> Response {
    let Some((host, vm)) = resolve(root, body["path"].as_str().unwrap_or_default()) else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "invalid path".into(),
        );
    };
    let not_found = || {
        connect_error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("path not found: {vm}"),
        )
    };
    match method {
        "ListDir" => {
            if !host.exists() {
                return not_found();
            }
            if !host.is_dir() {
                return connect_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_argument",
                    format!("path is not a directory: {vm}"),
                );
            }
            let mut entries = Vec::new();
            for item in std::fs::read_dir(&host).unwrap().flatten() {
                let name = item.file_name().to_string_lossy().into_owned();
                let child = if vm == "/" {
                    format!("/{name}")
                } else {
                    format!("{vm}/{name}")
                };
                if let Some(entry) = entry_info(&item.path(), &child) {
                    entries.push(entry);
                }
            }
            if entries.is_empty() {
                json_response(StatusCode::OK, json!({}))
            } else {
                json_response(StatusCode::OK, json!({"entries": entries}))
            }
        }
        "Stat" => match entry_info(&host, &vm) {
            Some(entry) => json_response(StatusCode::OK, json!({"entry": entry})),
            None => not_found(),
        },
        _ => connect_error(
            StatusCode::NOT_FOUND,
            "unimplemented",
            format!("{method} is not implemented"),
        ),
    }
}
