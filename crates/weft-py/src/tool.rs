//! A Python function as a weft tool. The Python side (`weft.tool`) gives its description as
//! JSON (name, description, input schema from the type hints, `idempotent`, approval) and a
//! callable `invoke(args_json, context_json) -> str` that runs the function (an async one on an
//! event loop) and answers `{"ok": RESULT}` or `{"error": {kind, message, detail}}`. The call
//! runs in a task of its own, whose thread is handed over to Python for the call
//! ([`tokio::task::block_in_place`]: weft's other work moves to another thread, and no further
//! thread switch stands between weft and the function), so a function that blocks holds up
//! neither weft nor an event loop; the GIL is taken only while Python runs.

use pyo3::prelude::*;
use serde_json::{Value, json};
use weft_core::{ToolError, ToolInfo};
use weft_tools::{Registry, Tool, ToolContext, ToolsError};

/// A Python function registered as a tool.
pub(crate) struct PyTool {
    info: ToolInfo,
    invoke: std::sync::Arc<Py<PyAny>>,
}

/// A tool as the Python side gives it: its description (JSON) and its `invoke`.
pub(crate) type Given = (String, Py<PyAny>);

/// Registers the Python tools `given` in `reg`; a description that does not read is an error
/// naming the tool's place in the list.
pub(crate) fn register(reg: &mut Registry, given: Vec<Given>) -> Result<(), ToolsError> {
    for (i, (info, invoke)) in given.into_iter().enumerate() {
        let mut info: ToolInfo = serde_json::from_str(&info).map_err(|e| {
            ToolsError::Declaration(format!(
                "tools={i}: the tool's description is not valid: {e}"
            ))
        })?;
        info.source = "python".into();
        reg.register(PyTool {
            info,
            invoke: std::sync::Arc::new(invoke),
        })?;
    }
    Ok(())
}

impl Tool for PyTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let context = json!({
            "session_id": ctx.session_id,
            "step": ctx.step,
            "call_id": ctx.call_id,
            "idempotency_key": ctx.idempotency_key,
            "attempt": ctx.attempt,
        })
        .to_string();
        let args = args.to_string();
        let name = &self.info.name;
        // Not on weft's first poll of the call, which runs calls that finish at once in the
        // session's own task: the call goes to a task of its own first, so that the calls of
        // a wave run at once and a function that blocks does not hold the session up.
        tokio::task::yield_now().await;
        let answered = tokio::task::block_in_place(|| {
            Python::attach(|py| {
                self.invoke
                    .call1(py, (args, context))
                    .and_then(|r| r.extract::<String>(py))
                    .map_err(|e| {
                        ToolError::new(
                            "python",
                            format!("tool `{name}` could not be called from weft: {e}"),
                        )
                    })
            })
        })?;
        answer(&self.info.name, &answered)
    }
}

/// The result in what `invoke` answered.
fn answer(tool: &str, text: &str) -> Result<Value, ToolError> {
    let mut v: Value = serde_json::from_str(text).map_err(|e| {
        ToolError::new(
            "invalid_output",
            format!("tool `{tool}`: its answer is not JSON: {e}"),
        )
    })?;
    if let Some(ok) = v.get_mut("ok") {
        return Ok(ok.take());
    }
    match v.get_mut("error").map(Value::take) {
        Some(e) => serde_json::from_value(e).map_err(|e| {
            ToolError::new(
                "invalid_output",
                format!("tool `{tool}`: its error does not read: {e}"),
            )
        }),
        None => Err(ToolError::new(
            "invalid_output",
            format!("tool `{tool}`: its answer has neither `ok` nor `error`"),
        )),
    }
    .and_then(Err)
}
