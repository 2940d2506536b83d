//! The file tools' work (`list_files`, `read_file`, `write_file`,
//! `upload_file`): the tools themselves are declared with the others in
//! `server.rs`, and call these.

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;

use super::SandboxServer;
use super::pages::{BINARY_PAGE_BYTES, Page, TEXT_PAGE_BYTES, looks_like_text};
use super::params::{ListFilesParams, ReadFileParams, UploadFileParams};
use super::results::{
    ListResult, ReadResult, WriteResult, decode_content, encode_content, structured,
};
use crate::sandbox::{EntryKind, GuestPath, SandboxError};

impl SandboxServer {
    pub(super) async fn list_files_inner(
        &self,
        p: ListFilesParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let caller = self.caller(ctx)?;
        let path = GuestPath::parse(&p.path)?;
        let sandbox = self
            .manager
            .get_or_restore(&caller.owner, &caller.caps, &p.session_id)
            .await?;
        let listing = sandbox
            .list(path.clone(), self.limits.max_list_entries)
            .await?;
        let mut text = format!("{} ({} entries", path, listing.entries.len());
        if listing.truncated {
            text.push_str(", more not shown");
        }
        text.push(')');
        for e in &listing.entries {
            let kind = match e.kind {
                EntryKind::Directory => "dir ",
                EntryKind::Symlink => "link",
                EntryKind::File => "file",
                EntryKind::Other => "othr",
            };
            text.push_str(&format!("\n{kind} {:>10}  {}", e.size, e.name));
        }
        Ok(structured(
            &ListResult {
                path: path.to_string(),
                files: listing.entries,
                truncated: listing.truncated,
            },
            text,
            false,
        ))
    }

    pub(super) async fn read_file_inner(
        &self,
        p: ReadFileParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let caller = self.caller(ctx)?;
        let path = GuestPath::parse(&p.file_path)?;
        let sandbox = self
            .manager
            .get_or_restore(&caller.owner, &caller.caps, &p.session_id)
            .await?;
        let offset = p.offset.unwrap_or(0);
        let max = self.limits.max_file_bytes;
        if p.length == Some(0) || p.length.is_some_and(|l| l > max) {
            return Err(SandboxError::InvalidArgument(format!(
                "length must be between 1 and {max} bytes (SANDBOX_MAX_FILE_BYTES)"
            )));
        }
        let asked = p.length.unwrap_or(TEXT_PAGE_BYTES.min(max));
        let mut file = sandbox.read(path.clone(), offset, asked).await?;
        if p.length.is_none()
            && !looks_like_text(&file.bytes)
            && file.bytes.len() as u64 > BINARY_PAGE_BYTES
        {
            // Base64 takes a third more: binary pages are smaller.
            file.bytes.truncate(BINARY_PAGE_BYTES as usize);
            file.truncated = true;
        }
        let page = Page::of(file, offset, p.length.is_none());
        let (content, encoding) = encode_content(page.bytes);
        let mut text = content.clone();
        if let Some(next) = page.next_offset {
            text.push_str(&format!(
                "\n[bytes {offset} to {} of {}; the file goes on: read_file with offset {next} for more]",
                next, page.size
            ));
        }
        Ok(structured(
            &ReadResult {
                path: path.to_string(),
                content,
                encoding,
                size: page.size,
                offset,
                length: page.length,
                truncated: page.next_offset.is_some(),
                next_offset: page.next_offset,
            },
            text,
            false,
        ))
    }

    pub(super) async fn upload_file_inner(
        &self,
        p: UploadFileParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        if p.file_name.contains('/') || p.file_name == "." || p.file_name == ".." {
            return Err(SandboxError::InvalidArgument(format!(
                "file_name '{}' must be a plain file name; put directories in destination_path",
                p.file_name.escape_debug()
            )));
        }
        let path = GuestPath::parse(&p.destination_path)?.join(&p.file_name)?;
        self.write(
            ctx,
            &p.session_id,
            &path.to_string(),
            p.file_content,
            p.encoding,
        )
        .await
    }

    pub(super) async fn write(
        &self,
        ctx: &RequestContext<RoleServer>,
        session_id: &str,
        file_path: &str,
        content: String,
        encoding: Option<crate::sandbox::Encoding>,
    ) -> Result<CallToolResult, SandboxError> {
        let path = GuestPath::parse(file_path)?;
        self.check_file_size(content.len() as u64 * 3 / 4)?;
        let bytes = decode_content(content, encoding)?;
        self.check_file_size(bytes.len() as u64)?;
        let caller = self.caller(ctx)?;
        let sandbox = self
            .manager
            .get_or_restore(&caller.owner, &caller.caps, session_id)
            .await?;
        let size = sandbox.write(path.clone(), bytes).await?;
        let message = format!("Wrote {size} bytes to {path}.");
        let text = message.clone();
        Ok(structured(
            &WriteResult {
                path: path.to_string(),
                message,
                size,
            },
            text,
            false,
        ))
    }
}
