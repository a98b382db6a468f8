// @ts-check
// Starting a run: an agent, a task, and the run's input as JSON, with the agent's tools and
// their input schemas beside it (what the planner can fill from `†input.*`). The input is
// checked as it is typed; the run is a new thread and a run of it, through LangGraph's routes.

import { api } from "./api.js";
import { h, fill, jsonError, pretty } from "./dom.js";
import { sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["AgentInfo"]} AgentInfo */
/** @typedef {import("./api-types").components["schemas"]["ToolInfo"]} ToolInfo */
/** @typedef {import("./api-types").components["schemas"]["Thread"]} Thread */
/** A tool's input schema (JSON Schema; `ToolInfo.input_schema` is untyped in the API). @typedef {{ properties?: Record<string, any>, required?: string[] }} InputSchema */

const RESERVED = ["messages", "task"];

/**
 * The page that starts a run.
 * @param {HTMLElement} main
 * @param {AgentInfo[]} agents
 * @param {(hash: string) => void} go
 */
export function startPage(main, agents, go) {
  if (!agents.length) {
    fill(main, h("div", { class: "welcome" }, h("h1", {}, "No agent to run"), h("p", {}, "Start weft serve with --agents DIR holding agent files.")));
    return;
  }
  const agentSel = h("select", { id: "run-agent" }, agents.map((a) => h("option", { value: a.name }, `${a.name} (${a.mode})`)));
  const task = h("textarea", { id: "run-task", rows: 3, placeholder: "What should the agent do?", required: true });
  const input = h("textarea", { id: "run-input", class: "code", rows: 8, spellcheck: "false", "aria-describedby": "run-input-check" });
  input.value = "{}";
  const inputCheck = h("div", { id: "run-input-check", class: "field-help", "aria-live": "polite" });
  const help = h("div", { class: "tool-help", id: "tool-help" });
  const status = h("div", { class: "problems", role: "alert" });
  const submit = h("button", { type: "submit", class: "button primary", id: "run-start" }, "Start run");

  const parsed = () => {
    const text = input.value.trim() || "{}";
    let v;
    try {
      v = JSON.parse(text);
    } catch (e) {
      return { error: `Not JSON: ${jsonError(text, e)}` };
    }
    if (v === null || typeof v !== "object" || Array.isArray(v)) return { error: "The input must be a JSON object, e.g. {\"customerId\": \"c1\"}." };
    const taken = RESERVED.filter((k) => k in v);
    if (taken.length) return { error: `\`${taken.join("`, `")}\` is taken by the task; rename the key.` };
    return { value: v };
  };
  const checkInput = () => {
    const p = parsed();
    inputCheck.className = p.error ? "problems" : "field-help";
    inputCheck.textContent = p.error || `${Object.keys(p.value).length} key(s); steps read them as †input.<key>.`;
    return p;
  };
  input.addEventListener("input", checkInput);

  const agent = () => agents.find((a) => a.name === agentSel.value) || agents[0];
  const insert = (name, schema) => {
    const p = parsed();
    if (p.error) {
      input.focus();
      return;
    }
    if (!(name in p.value)) p.value[name] = example(schema);
    input.value = JSON.stringify(p.value, null, 2);
    checkInput();
    input.focus();
  };
  const showTools = () => {
    const a = agent();
    fill(
      help,
      h("h2", {}, `Tools of ${a.name}`),
      h("p", { class: "muted" }, `${a.mode} mode${a.approve_plans ? " · plans wait for your approval" : ""}${a.description ? ` · ${a.description}` : ""}`),
      a.tools.length ? a.tools.map((t) => toolHelp(t, insert)) : h("p", { class: "muted" }, "This agent has no tool."),
    );
  };
  agentSel.addEventListener("change", showTools);

  const form = h(
    "form",
    { class: "panel", id: "run-form", "aria-labelledby": "run-title", novalidate: true },
    h("div", { class: "panel-head" }, h("h1", { id: "run-title" }, "New run")),
    h(
      "div",
      { class: "panel-body form-grid" },
      h(
        "div",
        {},
        h("div", { class: "field" }, h("label", { for: "run-agent" }, "Agent"), agentSel),
        h("div", { class: "field" }, h("label", { for: "run-task" }, "Task"), task),
        h(
          "div",
          { class: "field" },
          h("label", { for: "run-input" }, "Input (JSON object)"),
          input,
          inputCheck,
        ),
        h("div", { class: "row" }, submit, h("span", { class: "muted" }, h("span", { class: "kbd" }, "Ctrl"), "+", h("span", { class: "kbd" }, "Enter"), " starts")),
        status,
      ),
      help,
    ),
  );
  form.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    status.textContent = "";
    const p = checkInput();
    if (!task.value.trim()) {
      status.textContent = "Write the task first.";
      task.focus();
      return;
    }
    if (p.error) {
      status.textContent = p.error;
      input.focus();
      return;
    }
    submit.disabled = true;
    try {
      /** @type {Thread} */
      const thread = await api("/threads", { method: "POST", body: {} });
      await api(`/threads/${encodeURIComponent(thread.thread_id)}/runs`, {
        method: "POST",
        body: {
          assistant_id: agent().name,
          input: { messages: [{ role: "user", content: task.value.trim() }], ...p.value },
        },
      });
      // The list shows the new session at once, not at its next poll.
      window.dispatchEvent(new CustomEvent("weft:session-changed"));
      go(`#/s/${encodeURIComponent(thread.thread_id)}`);
    } catch (err) {
      status.textContent = sayApiError(err, "The run did not start");
      submit.disabled = false;
    }
  });
  fill(main, form);
  showTools();
  checkInput();
  task.focus();
}

/**
 * A tool, its description and its arguments, each insertable into the input.
 * @param {ToolInfo} t
 * @param {(name: string, schema: any) => void} insert
 */
function toolHelp(t, insert) {
  const schema = /** @type {InputSchema | null | undefined} */ (t.input_schema);
  const props = schema?.properties || {};
  const required = new Set(schema?.required || []);
  return h(
    "details",
    { open: true },
    h("summary", {}, t.name, t.requires_approval ? " · needs approval" : ""),
    t.description && h("p", { class: "muted" }, t.description),
    Object.keys(props).length
      ? h(
          "ul",
          { class: "params" },
          Object.entries(props).map(([name, s]) =>
            h(
              "li",
              {},
              h("code", {}, name),
              required.has(name) && h("span", { class: "req", title: "required" }, " *"),
              h("span", { class: "muted" }, ` ${typeOf(s)}${s.description ? ` — ${s.description}` : ""} `),
              h(
                "button",
                { type: "button", class: "button small", "aria-label": `Add ${name} to the input`, onclick: () => insert(name, s) },
                "+ input",
              ),
            ),
          ),
        )
      : h("p", { class: "muted" }, "No arguments."),
    h("details", {}, h("summary", {}, "schema"), h("pre", {}, pretty(t.input_schema))),
  );
}

function typeOf(s) {
  if (Array.isArray(s.enum)) return s.enum.map((x) => JSON.stringify(x)).join(" | ");
  return Array.isArray(s.type) ? s.type.join(" | ") : s.type || "any";
}

function example(s) {
  if (s.default !== undefined) return s.default;
  if (Array.isArray(s.enum) && s.enum.length) return s.enum[0];
  const t = Array.isArray(s.type) ? s.type[0] : s.type;
  return { string: "", number: 0, integer: 0, boolean: false, array: [], object: {} }[t] ?? null;
}
