//! What crosses between an upstream server and the guest: the tool
//! descriptors guests see (renamed `<server>_<tool>`), and a call's result
//! as a Python value or an exception.

use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value, json};

use crate::door::{FailureKind, ToolFailure};

/// Longest error text from an upstream a guest is told.
const MAX_ERROR_CHARS: usize = 4000;

/// The name guests call an upstream tool by: `<server>_<tool>`, with every
/// character that cannot be in a Python name made `_`.
pub fn guest_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{server}_{tool}")
}

/// The descriptor the guest's `list` answer carries for `tool` of `server`,
/// named `name`: its description (with where it comes from) and its input
/// schema, from which the guest makes the function's signature and
/// docstring.
pub fn descriptor(server: &str, name: &str, tool: &Tool) -> Value {
    let mut description = tool
        .description
        .as_deref()
        .or(tool.title.as_deref())
        .unwrap_or("")
        .trim()
        .to_owned();
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str(&format!(
        "(The tool {:?} of the MCP server '{server}', called from the host.)",
        tool.name
    ));
    let mut descriptor = json!({
        "name": name,
        "description": description,
        "inputSchema": Value::Object((*tool.input_schema).clone()),
    });
    if let Some(annotations) = &tool.annotations
        && let Ok(annotations) = serde_json::to_value(annotations)
    {
        descriptor["annotations"] = annotations;
    }
    descriptor
}

/// A call's result as the guest gets it: an error result raises; structured
/// content is the value when the tool gives it; one text block is a str;
/// anything else is the list of content blocks, images and audio as bytes.
/// A value over `max_bytes` (as JSON) is refused as too large.
pub fn value_of(
    result: CallToolResult,
    server: &str,
    max_bytes: usize,
) -> Result<Value, ToolFailure> {
    if result.is_error == Some(true) {
        return Err(ToolFailure::new(
            FailureKind::ToolError,
            clip(&format!("{server}: {}", text_of(&result.content))),
        ));
    }
    let value = match result.structured_content {
        Some(structured) => structured,
        None => content_value(&result.content),
    };
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size > max_bytes {
        return Err(ToolFailure::new(
            FailureKind::TooLarge,
            format!(
                "the result from '{server}' is {size} bytes as JSON; at most {max_bytes} (max_result_bytes in SANDBOX_UPSTREAMS)"
            ),
        ));
    }
    Ok(value)
}

/// The text blocks of `content`, joined; other blocks named by their type.
fn text_of(content: &[rmcp::model::ContentBlock]) -> String {
    let blocks: Vec<String> = content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => "[non-text content]".to_owned(),
        })
        .collect();
    if blocks.is_empty() {
        "the tool reported an error and gave no text".to_owned()
    } else {
        blocks.join("\n")
    }
}

/// One text block as a str; otherwise each block as a dict, base64 data as
/// `$bytes` (which the guest decodes into bytes).
fn content_value(content: &[rmcp::model::ContentBlock]) -> Value {
    if let [only] = content
        && let Some(text) = only.as_text()
    {
        return Value::String(text.text.clone());
    }
    let blocks = content.iter().map(|block| {
        let mut value = serde_json::to_value(block).unwrap_or(Value::Null);
        if let Some(object) = value.as_object_mut()
            && matches!(
                object.get("type").and_then(Value::as_str),
                Some("image" | "audio")
            )
            && let Some(Value::String(data)) = object.remove("data")
        {
            object.insert("data".into(), bytes_value(data));
        }
        value
    });
    Value::Array(blocks.collect())
}

fn bytes_value(base64: String) -> Value {
    let mut wrapped = Map::new();
    wrapped.insert("$bytes".into(), Value::String(base64));
    Value::Object(wrapped)
}

fn clip(text: &str) -> String {
    if text.chars().count() <= MAX_ERROR_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_ERROR_CHARS).collect();
    cut.push_str(" [...]");
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;

    #[test]
    fn names_become_python_names() {
        assert_eq!(guest_name("notes", "search"), "notes_search");
        assert_eq!(guest_name("gh", "list-issues.v2"), "gh_list_issues_v2");
    }

    #[test]
    fn structured_content_wins_and_one_text_is_a_str() {
        let mut structured = CallToolResult::success(vec![Content::text("{\"a\":1}")]);
        structured.structured_content = Some(json!({"a": 1}));
        assert_eq!(value_of(structured, "s", 1000).unwrap(), json!({"a": 1}));
        let text = CallToolResult::success(vec![Content::text("hello")]);
        assert_eq!(value_of(text, "s", 1000).unwrap(), json!("hello"));
    }

    #[test]
    fn images_come_as_bytes_and_errors_raise() {
        let image = CallToolResult::success(vec![
            Content::text("a plot"),
            Content::image("aGk=", "image/png"),
        ]);
        let value = value_of(image, "s", 1000).unwrap();
        assert_eq!(value[1]["data"], json!({"$bytes": "aGk="}));
        assert_eq!(value[0]["text"], "a plot");
        let failed = CallToolResult::error(vec![Content::text("no such city")]);
        let failure = value_of(failed, "weather", 1000).unwrap_err();
        assert_eq!(failure.kind, FailureKind::ToolError);
        assert_eq!(failure.message, "weather: no such city");
    }

    #[test]
    fn a_result_over_the_cap_is_too_large() {
        let big = CallToolResult::success(vec![Content::text("x".repeat(2000))]);
        let failure = value_of(big, "s", 1000).unwrap_err();
        assert_eq!(failure.kind, FailureKind::TooLarge);
        assert!(failure.message.contains("max_result_bytes"));
    }
}
