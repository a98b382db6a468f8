// @ts-check
// The model calls of a session (`GET /sessions/{id}/model-calls`): each call's purpose, step,
// outcome, attempt, tokens, cost, latency and time to first token, the tokens summed against
// the session's totals; and the inspector of one call (`GET /sessions/{id}/model-calls/{n}`): the request weft sent (messages,
// tools offered, response format), the raw reply and the events it meant.

import { h, fill, duration, usageText, count, cost, cut } from "./dom.js";
import { api } from "./api.js";
import { jsonTree } from "./json.js";

/** @typedef {import("./api-types").components["schemas"]["ModelCalls"]} ModelCalls */
/** @typedef {import("./api-types").components["schemas"]["ModelCall"]} ModelCall */
/** @typedef {import("./api-types").components["schemas"]["ModelCallDetail"]} ModelCallDetail */
/**
 * A message of a request. The API's schema names only `role`; the rest are weft-core's
 * `Message` fields the inspector reads.
 * @typedef {{ role: string, content?: string, call_id?: string, name?: string, is_error?: boolean,
 *   tool_calls?: { id: string, name: string, arguments: unknown }[] }} Message
 */
/** @typedef {{ name: string, description?: string, parameters?: unknown }} ToolDef */

const OUTCOME = { replied: "replied", rejected: "refused", failed: "failed" };

/**
 * The list of the session's model calls with the inspector under it. `open`: the call shown
 * (its number), `onOpen(n)` when another is chosen. Fetches the list (and the call) and fills
 * the returned element when they come.
 * @param {string} id
 * @param {{ open: number | null, onOpen: (n: number) => void }} options
 */
export function modelCalls(id, { open, onOpen }) {
  const root = h("div", { class: "model-calls stack", id: "model-calls", "aria-busy": "true" }, h("p", { class: "muted" }, "Loading the model calls…"));
  api(`/sessions/${encodeURIComponent(id)}/model-calls`)
    .then((/** @type {ModelCalls} */ list) => {
      root.removeAttribute("aria-busy");
      if (!list.calls.length) {
        fill(root, h("p", { class: "muted" }, "No model call yet."));
        return;
      }
      const inspector = h("section", { class: "inspector", id: "inspector", "aria-label": "Model call", tabindex: -1 });
      fill(root, callTable(list, open, onOpen), inspector);
      if (open !== null) showCall(id, open, inspector);
    })
    .catch((e) => fill(root, h("div", { class: "callout bad", role: "alert" }, `The model calls could not be read: ${e.message}`)));
  return root;
}

/**
 * The calls as a table, their sums against the session's totals in its footer.
 * @param {ModelCalls} list
 * @param {number | null} open
 * @param {(n: number) => void} onOpen
 */
function callTable(list, open, onOpen) {
  const sum = { input: 0, output: 0, cost: 0, priced: false };
  for (const c of list.calls) {
    sum.input += c.usage.input_tokens || 0;
    sum.output += c.usage.output_tokens || 0;
    if (c.usage.cost_usd !== null && c.usage.cost_usd !== undefined) {
      sum.cost += c.usage.cost_usd;
      sum.priced = true;
    }
  }
  const t = list.totals;
  const agrees = sum.input === t.input_tokens && sum.output === t.output_tokens;
  return h(
    "table",
    { class: "mc-table" },
    h("caption", { class: "sr-only" }, "Model calls"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["#", "Purpose", "Outcome", "Tokens in", "Tokens out", "Cost", "Latency", "First token"].map((x) => h("th", { scope: "col" }, x)),
      ),
    ),
    h(
      "tbody",
      {},
      list.calls.map((c) =>
        h(
          "tr",
          { class: ["mc-row", c.n === open && "selected", c.outcome !== "replied" && "bad"], dataset: { n: String(c.n), purpose: c.purpose, outcome: c.outcome, input: String(c.usage.input_tokens || 0), output: String(c.usage.output_tokens || 0) } },
          h("td", {}, h("button", { type: "button", class: "button small ghost mc-open", "aria-pressed": c.n === open ? "true" : "false", "aria-label": `Inspect model call ${c.n}: ${c.purpose}`, onclick: () => onOpen(c.n) }, String(c.n))),
          h("td", {}, h("span", { class: "mono" }, c.purpose), c.step && h("span", { class: "chip mono" }, c.step), c.attempt > 1 && h("span", { class: "pill retry" }, `attempt ${c.attempt}`)),
          h("td", {}, h("span", { class: ["pill", c.outcome === "replied" ? "ok" : "error"], title: c.reason || "" }, OUTCOME[c.outcome] || c.outcome)),
          h("td", { class: "num" }, count(c.usage.input_tokens)),
          h("td", { class: "num" }, count(c.usage.output_tokens)),
          h("td", { class: "num" }, cost(c.usage.cost_usd)),
          h("td", { class: "num" }, duration(c.latency_ms)),
          h("td", { class: "num" }, c.ttft_ms === null || c.ttft_ms === undefined ? "" : duration(c.ttft_ms)),
        ),
      ),
    ),
    h(
      "tfoot",
      {},
      h(
        "tr",
        { id: "mc-sum", dataset: { input: String(sum.input), output: String(sum.output), totalInput: String(t.input_tokens), totalOutput: String(t.output_tokens), agrees: agrees ? "1" : "0" } },
        h("th", { scope: "row", colspan: 3 }, `${list.calls.length} call${list.calls.length === 1 ? "" : "s"}${agrees ? " · the session's totals" : ` · the session's totals are ${usageText(t)}`}`),
        h("td", { class: "num" }, count(sum.input)),
        h("td", { class: "num" }, count(sum.output)),
        h("td", { class: "num" }, sum.priced ? cost(sum.cost) : ""),
        h("td", {}),
        h("td", {}),
      ),
    ),
  );
}

/**
 * Fetches call `n` and shows it in `el`.
 * @param {string} id
 * @param {number} n
 * @param {HTMLElement} el
 */
function showCall(id, n, el) {
  fill(el, h("p", { class: "muted" }, `Loading model call ${n}…`));
  api(`/sessions/${encodeURIComponent(id)}/model-calls/${n}`)
    .then((/** @type {ModelCallDetail} */ d) => {
      fill(el, inspect(d));
      el.dataset.n = String(n);
    })
    .catch((e) => fill(el, h("div", { class: "callout bad", role: "alert" }, `Model call ${n} could not be read: ${e.message}`)));
}

/**
 * One call in full.
 * @param {ModelCallDetail} d
 */
function inspect(d) {
  const c = d.call;
  const req = d.request;
  /** @type {Message[]} */
  const messages = req ? /** @type {any} */ (req.messages) : [];
  /** @type {ToolDef[]} */
  const tools = req ? /** @type {any} */ (req.tools) : [];
  return [
    h(
      "header",
      { class: "card-head" },
      h("h3", {}, `Model call ${c.n} · ${c.purpose}${c.step ? ` · step ${c.step}` : ""}`),
      h("span", { class: ["pill", c.outcome === "replied" ? "ok" : "error"] }, OUTCOME[c.outcome] || c.outcome),
      c.attempt > 1 && h("span", { class: "pill retry" }, `attempt ${c.attempt}`),
    ),
    h(
      "dl",
      { class: "mc-facts" },
      fact("Model", c.model || "—"),
      fact("Tokens", usageText(c.usage)),
      fact("Latency", duration(c.latency_ms)),
      fact("First token", c.ttft_ms === null || c.ttft_ms === undefined ? "— (the reply did not stream)" : duration(c.ttft_ms)),
      fact("Started", new Date(c.started_ms).toLocaleTimeString()),
      c.finish_reason && fact("Stopped", c.finish_reason),
      fact("Event", `#${c.seq}`),
    ),
    c.reason && h("div", { class: "callout bad", id: "mc-reason" }, c.outcome === "failed" ? `The call failed: ${c.reason}` : `The reply was refused: ${c.reason}`),
    h("h4", {}, "Request"),
    d.request_error && h("div", { class: "callout", id: "mc-request-error" }, d.request_error),
    req && [
      h(
        "details",
        { class: "mc-part", id: "mc-messages", open: true },
        h("summary", {}, `Messages (${messages.length})`),
        h("ol", { class: "mc-messages" }, messages.map((m, i) => message(m, i))),
      ),
      h(
        "details",
        { class: "mc-part", id: "mc-tools", open: tools.length <= 8 },
        h("summary", {}, `Tools offered for calling (${tools.length})`),
        tools.length
          ? h(
              "ul",
              { class: "mc-tools" },
              tools.map((t) => h("li", { dataset: { tool: t.name } }, h("span", { class: "mono tool" }, t.name), t.description && h("span", { class: "muted" }, ` ${cut(t.description, 160)}`), h("details", {}, h("summary", {}, "parameters"), jsonTree(t.parameters, `the parameters of ${t.name}`)))),
            )
          : h("p", { class: "muted" }, c.purpose === "plan" ? "None: a planner is given the tools as a list in its prompt, and its reply's schema spells out each tool's step." : "None: the model could only reply with text."),
      ),
      h(
        "details",
        { class: "mc-part", id: "mc-format" },
        h("summary", {}, req.response_schema ? "Response format: JSON matching a schema" : "Response format: free text"),
        req.response_schema ? jsonTree(req.response_schema, "the response schema") : h("p", { class: "muted" }, "The reply's text was not constrained."),
        (req.max_tokens || req.temperature !== null) && h("p", { class: "muted" }, [req.max_tokens && `max_tokens ${req.max_tokens}`, req.temperature !== null && req.temperature !== undefined && `temperature ${req.temperature}`].filter(Boolean).join(" · ")),
      ),
    ],
    h("h4", {}, "Raw reply"),
    d.reply
      ? h(
          "div",
          { id: "mc-reply" },
          d.reply.content ? h("pre", { class: "output mc-raw" }, d.reply.content) : h("p", { class: "muted" }, "No text."),
          d.reply.tool_calls.length > 0 && [h("h4", {}, `Tool calls (${d.reply.tool_calls.length})`), jsonTree(d.reply.tool_calls, "the tool calls")],
          d.reply.refused.length > 0 && [
            h("h4", {}, `Asked again ${d.reply.refused.length} time${d.reply.refused.length === 1 ? "" : "s"} before this reply`),
            h(
              "ol",
              { class: "mc-refused" },
              d.reply.refused.map((t) => h("li", {}, h("div", { class: "callout" }, `Refused: ${t.reason}`), h("pre", { class: "output mc-raw" }, t.text))),
            ),
          ],
        )
      : h("p", { class: "muted" }, "No reply: the call failed."),
    h("h4", {}, "Parsed decision"),
    d.decision.length
      ? h(
          "ol",
          { class: "mc-decision", id: "mc-decision" },
          d.decision.map((e) => h("li", { dataset: { type: String(/** @type {any} */ (e).type) } }, h("span", { class: "t mono" }, String(/** @type {any} */ (e).type)), jsonTree(e, "the event"))),
        )
      : h("p", { class: "muted" }, c.outcome === "failed" ? "Nothing: the call failed and is tried again (or the run ends)." : "The reply was recorded and nothing else followed from it."),
  ];
}

/** @param {string} k @param {string} v */
function fact(k, v) {
  return [h("dt", {}, k), h("dd", {}, v)];
}

/**
 * A message of the request: its role, its text (long ones folded), its tool calls or the call
 * it answers.
 * @param {Message} m
 * @param {number} i
 */
function message(m, i) {
  const text = m.content || "";
  const long = text.length > 600;
  const body = h("pre", { class: "mc-text" }, text);
  return h(
    "li",
    { class: ["mc-msg", `role-${m.role}`], dataset: { role: m.role } },
    h("span", { class: "mc-role" }, `${i + 1}. ${m.role}${m.name ? ` · ${m.name}` : ""}${m.is_error ? " · error" : ""}`),
    text && (long ? h("details", {}, h("summary", {}, `${cut(text, 120)} (${text.length.toLocaleString()} characters)`), body) : body),
    m.tool_calls && m.tool_calls.length > 0 && jsonTree(m.tool_calls, "the tool calls"),
  );
}
