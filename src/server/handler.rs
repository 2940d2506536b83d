//! The MCP handler around the tools: calls run to their end or as tasks, a
//! panicking call becomes an error result, sandbox files are resources,
//! and the server says what it offers.

use rmcp::ErrorData;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool_handler};

use super::{SandboxServer, resources, tasks};

/// Awaits a tool call; if it panics, logs the panic and answers with an
/// error result, so the client gets an answer and the server keeps serving.
async fn contain_panics(
    tool: &str,
    call: impl std::future::Future<Output = Result<CallToolResponse, ErrorData>>,
) -> Result<CallToolResponse, ErrorData> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_owned());
            tracing::error!(tool, panic = %what, "a tool call panicked");
            Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                "internal error in {tool}: {what}. The server is still running; please report this as a bug."
            ))])
            .into())
        }
    }
}

impl SandboxServer {
    /// Runs a tool call to its end; a panic in it becomes an error result
    /// instead of a request that never gets an answer.
    async fn call_now(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let call = ToolCallContext::new(self, request, context);
        contain_panics(&name, self.tool_router.call(call)).await
    }

    /// `task_id` when the caller started that task; the unknown-task error
    /// otherwise.
    fn own_task<'a>(
        &self,
        task_id: &'a str,
        context: &RequestContext<RoleServer>,
    ) -> Result<&'a str, ErrorData> {
        let owner = self.caller(context).map_err(refused)?.owner;
        self.task_owners.check(task_id, &owner)
    }
}

/// A request without the caller an authorized server requires.
fn refused(error: crate::sandbox::SandboxError) -> ErrorData {
    ErrorData::invalid_request(error.to_string(), None)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SandboxServer {
    /// Runs a tool: as a task when the client declared tasks and the tool
    /// can take long, else to its end.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if tasks::wanted(&request, &context) {
            let owner = self.caller(&context).map_err(refused)?.owner;
            let server = self.clone();
            let response = tasks::start(&self.tasks, context.clone(), move |context| async move {
                server.call_now(request, context).await
            });
            self.task_owners.record(&response, &owner);
            return Ok(response);
        }
        self.call_now(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let owner = self.caller(&context).map_err(refused)?.owner;
        let cursor = request.and_then(|r| r.cursor);
        resources::list(&self.manager, &owner, cursor.as_deref()).await
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = self.caller(&context).map_err(refused)?;
        let contents = resources::read(
            &self.manager,
            &caller,
            &request.uri,
            self.limits.max_file_bytes,
        )
        .await?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = self.own_task(&request.task_id, &context)?;
        Ok(GetTaskResult::new(self.tasks.get_task(id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = self.own_task(&request.task_id, &context)?;
        self.tasks.update_task(id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = self.own_task(&request.task_id, &context)?;
        self.tasks.cancel_task(id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-code-sandbox",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(self.offer.instructions())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_tool_call_becomes_an_error_result() {
        let result = contain_panics("boom", async { panic!("kaboom") }).await;
        let CallToolResponse::Complete(result) = result.unwrap() else {
            panic!("expected a complete result")
        };
        assert_eq!(result.is_error, Some(true));
        let text = result.content[0].as_text().unwrap().text.clone();
        assert!(text.contains("boom") && text.contains("kaboom"), "{text}");
    }
}
