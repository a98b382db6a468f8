// @ts-check
// What a person can do about an error, by its kind (the `kind` of a tool error as weft records
// it), and how an error of the API is said.

const HINTS = {
  exit_status:
    "The tool's command exited with an error (its stderr is in the step's details and its tool call). Fix the command or the arguments it was given, then fork the session from before this step, or give it a new task.",
  timeout:
    "The call took longer than the tool's `timeout`. Raise the timeout in the agent file, or make the tool answer sooner, then fork from before this step.",
  spawn:
    "The tool's program could not start. Check its `command` in the agent file: the program must be on PATH or a path from the agent file's folder.",
  invalid_arguments:
    "The arguments do not match the tool's input schema. Correct the plan (or the run's input) so that every required argument is there with the right type.",
  invalid_output:
    "The tool answered with something weft cannot use (not JSON, or nested too deep). Make it print one JSON value on stdout.",
  unknown_outcome:
    "weft cannot tell whether this call took effect: the process running it stopped in the middle of it. Check the tool's target before running it again.",
  interrupted:
    "The call was stopped before it finished (the session was forked or its process stopped). Running the session again runs the step again.",
  cancelled: "The call was stopped because the session was cancelled.",
  denied: "A person denied this call. Give the session a new task, or fork it from before the approval to decide again.",
  refused: "weft refused the call before it ran (see the reason). Correct the plan or the arguments.",
  not_found: "The agent has no tool of this name. Declare it in the agent file's `tools`, or correct the plan.",
  http_status:
    "The HTTP tool's server answered with an error status; its body is below. Check the URL, the credentials (secrets) and the request body.",
  http: "The HTTP request failed before an answer came (connection, TLS or redirect). Check the URL and that the server is up.",
  unavailable: "The tool's server is not available at the moment. Try again once it is back.",
  secret: "A secret the tool needs could not be read. Check the secret's `env` or `file` in the agent file.",
  unknown_tool: "The agent has no tool of this name. Declare it in the agent file's `tools`, or correct the plan.",
  tool_error: "The tool itself reported an error; its message is below.",
  mcp: "The MCP server failed the call; its message is below.",
  template: "A template of the tool (its URL, headers or body) could not be rendered. Check the agent file.",
  executor: "The step executor could not carry out the step. See its replies in the step's log.",
  condition: "The step's `_when` condition could not be evaluated. Correct the condition in the plan.",
  io: "Reading or writing the tool's input or output failed.",
  mcp_protocol: "The MCP server broke the protocol (e.g. printed a line that is not JSON on stdout). Check the server's logs.",
};

/** A hint for a tool error kind. */
export function hint(kind) {
  return HINTS[kind] || "See the error's detail below; fix its cause, then fork the session from before the failure or give it a new task.";
}

/** A hint for the failure of a whole run, from its error text. */
export function runHint(text = "") {
  if (/rejected the plan/.test(text)) return "The plan was rejected. Give the session a new task, or fork it from before the approval.";
  if (/cancel/.test(text)) return "The session was cancelled. Fork it to try again from any earlier event.";
  if (/model|provider|api key|connect|status 5\d\d|status 4\d\d/i.test(text))
    return "A model call failed. Check that the model server is reachable and the API key is set, then fork from before the failure.";
  if (/max_/i.test(text)) return "A limit of the agent file was reached. Raise it under `limits`, then fork or give a new task.";
  return "Look at the failed steps and tool calls below for the cause; fork from before it to try again.";
}

/** An API error as a sentence a person can act on. */
export function sayApiError(e, doing) {
  if (!e) return "";
  const what = doing ? `${doing}: ` : "";
  if (e.status === 0) return `${what}weft serve cannot be reached. Is it running? The page retries by itself.`;
  if (e.status === 401) return `${what}the API key was refused. Sign in again.`;
  if (e.status === 404) return `${what}not found (it may belong to another user, or be gone).`;
  if (e.status === 409) return `${what}${e.detail}`;
  if (e.status === 413) return `${what}the request is too large for the server (--max-body).`;
  if (e.status === 429) return `${what}${e.detail}`;
  if (e.status >= 500) return `${what}the server failed (${e.detail}). Try again.`;
  return `${what}${e.detail || e.message}`;
}
