// @ts-check
// Tool calls as cards (the call, its result or error, duration, retries, unknown outcomes), the
// decisions of a plan run (reviews, plan versions and what each replan changed), and a ReAct
// agent's conversation.

import { h, pretty, duration, when, cut } from "./dom.js";
import { hint } from "./errors.js";
import { jsonTree } from "./json.js";

/** @typedef {import("./api-types").components["schemas"]["SessionView"]} SessionView */
/** @typedef {import("./api-types").components["schemas"]["Card"]} Card */
/** @typedef {import("./api-types").components["schemas"]["ToolError"]} ToolError */
/** @typedef {import("./api-types").components["schemas"]["Review"]} Review */
/** @typedef {import("./api-types").components["schemas"]["PlanVersion"]} PlanVersion */
/**
 * A message of `SessionView.conversation`. The API's schema names only `role`; the rest are the
 * fields of weft-core's `Message` that the page reads.
 * @typedef {SessionView["conversation"][number] & {
 *   content?: string | null, call_id?: string, name?: string, is_error?: boolean,
 *   tool_calls?: { id: string, name: string, arguments: unknown }[],
 * }} Message
 */

const STATUS = {
  ok: "ok",
  error: "error",
  unknown_outcome: "unknown outcome",
  running: "running",
  blocked: "blocked",
  answered: "answered",
};

/**
 * A tool error's detail: its text outputs (stderr, stdout, a body) as text, the rest as JSON.
 * @param {ToolError["detail"]} detail
 */
export function errorDetail(detail) {
  if (detail === undefined || detail === null) return null;
  if (typeof detail !== "object" || Array.isArray(detail)) return h("pre", {}, pretty(detail));
  const texts = [];
  const rest = {};
  for (const [k, v] of Object.entries(detail)) {
    if (typeof v === "string" && (v.includes("\n") || v.length > 60)) texts.push([k, v]);
    else rest[k] = v;
  }
  return [
    ...texts.map(([k, v]) => [h("h4", {}, k), h("pre", { class: "output", dataset: { field: k } }, v.replace(/\n$/, ""))]),
    Object.keys(rest).length > 0 && h("pre", {}, pretty(rest)),
  ];
}

/**
 * A tool call's card. `jump(seq)`: show the session at that event.
 * @param {Card} c
 * @param {(seq: number) => void} jump
 */
export function callCard(c, jump) {
  const error = c.outcome && c.outcome.status === "error" ? c.outcome.error : null;
  return h(
    "article",
    { class: ["card", "call", `st-${c.status}`], dataset: { call: c.call_id, status: c.status }, "aria-label": `Call of ${c.tool}: ${STATUS[c.status]}` },
    h(
      "header",
      { class: "card-head" },
      h("span", { class: "tool" }, c.tool),
      c.step && h("span", { class: "chip mono" }, `step ${c.step}`),
      h("span", { class: ["pill", c.status] }, c.status === "running" ? [h("span", { class: "spin", "aria-hidden": "true" }), " running"] : STATUS[c.status]),
      c.attempt > 1 && h("span", { class: "pill retry" }, `attempt ${c.attempt}`),
      c.duration_ms !== null && c.duration_ms !== undefined && h("span", { class: "muted" }, duration(c.duration_ms)),
      h("span", { class: "spacer" }),
      h(
        "button",
        { type: "button", class: "button small ghost", title: `Show the session at event ${c.seq}`, onclick: () => jump(c.seq) },
        `#${c.seq}`,
      ),
      h("time", { class: "faint", datetime: c.at, title: when(c.at) }, new Date(c.at).toLocaleTimeString()),
    ),
    h(
      "div",
      { class: "card-body" },
      h("h4", {}, "Arguments"),
      jsonTree(c.args, "the arguments"),
      c.status === "ok" && [h("h4", {}, "Result"), jsonTree(c.outcome?.status === "ok" ? c.outcome.output : undefined, "the result")],
      error && [
        h("h4", {}, `Error · ${error.kind}`),
        h("div", { class: ["callout", "bad"] }, error.message),
        errorDetail(error.detail),
        h("p", { class: "muted hint" }, hint(error.kind)),
      ],
      c.status === "blocked" && h("div", { class: "callout" }, `Refused before it ran: ${c.reason}`),
      c.retry &&
        h(
          "div",
          { class: "callout" },
          `Failed (${c.retry.error.kind}: ${cut(c.retry.error.message, 160)}); retried as attempt ${c.retry.next_attempt} after ${duration(c.retry.in_ms)}.`,
        ),
    ),
  );
}

/**
 * The reviews and plan versions, in the order they happened.
 * @param {SessionView} view
 * @param {(seq: number) => void} jump
 */
export function decisions(view, jump) {
  const items = [
    ...view.reviews.map((r) => ({ seq: r.seq, node: review(r) })),
    ...view.plans.map((p, i) => ({ seq: p.seq, node: planVersion(p, view.plans.slice(0, i).filter((x) => x.kind !== "rejected").length + 1) })),
  ].sort((a, b) => a.seq - b.seq);
  if (!items.length) return h("p", { class: "muted" }, "No plan or review yet.");
  return h(
    "ol",
    { class: "timeline" },
    items.map((it) =>
      h(
        "li",
        {},
        h("span", { class: "seq" }, h("button", { type: "button", onclick: () => jump(it.seq), title: `Show the session at event ${it.seq}` }, `#${it.seq}`)),
        h("div", {}, it.node),
      ),
    ),
  );
}

/** @param {Review} r */
function review(r) {
  return [h("span", { class: ["decision", r.decision] }, r.decision), " ", h("span", {}, r.reason || "")];
}

/** @param {PlanVersion} p @param {number} version */
function planVersion(p, version) {
  if (p.kind === "rejected") {
    return [
      h("b", {}, "Plan refused"),
      h("span", { class: "muted" }, " (sent back to the planner)"),
      h(
        "ul",
        { class: "problems" },
        (p.problems || []).map((x) => h("li", {}, [x.step && `step ${x.step}`, x.field && `field ${x.field}`].filter(Boolean).join(", ") + (x.step || x.field ? ": " : "") + x.message)),
      ),
    ];
  }
  if (p.kind === "accepted") {
    return [h("b", {}, `Plan v${version}`), h("span", { class: "muted" }, ` accepted: ${(p.steps || []).join(", ")}`)];
  }
  const ch = p.changes || { added: [], removed: [], changed: [] };
  const call = (c) => `${c._id} ${c._tool || "(step executor)"}`;
  return [
    h("b", {}, `Replan → v${version}`),
    p.reason && h("span", {}, ` — ${p.reason}`),
    h(
      "ul",
      { class: "diff", "aria-label": "What the replan changed" },
      ch.added.map((c) => h("li", { class: "add" }, `+ ${call(c)}`)),
      ch.removed.map((c) => h("li", { class: "del" }, `− ${call(c)}`)),
      ch.changed.map((c) => h("li", { class: "chg", title: `${pretty(c.before)}\n→\n${pretty(c.after)}` }, `~ ${c.id} (arguments changed)`)),
      !ch.added.length && !ch.removed.length && !ch.changed.length && h("li", { class: "muted" }, "no pending step changed"),
    ),
  ];
}

/**
 * A ReAct agent's conversation: tasks, the model's replies with their tool calls, results.
 * @param {SessionView} view
 * @param {Map<string, Card>} calls the session's calls by id
 * @param {(seq: number) => void} jump
 */
export function conversation(view, calls, jump) {
  const msgs = /** @type {Message[]} */ (view.conversation);
  if (!msgs.length) return h("p", { class: "muted" }, "No message yet.");
  // A call answered in the conversation (an `ask_user` the person answered, a denied call) is
  // over even though no tool ran for it.
  const results = new Map(msgs.filter((m) => m.role === "tool").map((m) => [m.call_id, m]));
  return h(
    "div",
    { class: "chat" },
    msgs.map((m) => {
      if (m.role === "user") return h("div", { class: "msg user" }, h("div", { class: "who" }, "you"), h("div", { class: "text" }, m.content));
      if (m.role === "assistant") {
        return h(
          "div",
          { class: "msg assistant" },
          h("div", { class: "who" }, view.agent),
          m.content && h("div", { class: "text" }, m.content),
          m.tool_calls?.length &&
            h(
              "div",
              { class: "calls" },
              m.tool_calls.map((tc) => {
                const c = calls.get(tc.id);
                const asked = view.waiting?.call_id === tc.id;
                const result = results.get(tc.id);
                const over = result && (result.is_error ? "error" : tc.name === "ask_user" ? "answered" : "ok");
                const status = c ? c.status : asked ? (view.waiting?.kind === "tool_approval" ? "waiting for your approval" : "waiting for your answer") : over || "pending";
                return h(
                  "button",
                  { type: "button", class: "chip mono", onclick: () => c && jump(c.seq), title: pretty(tc.arguments) },
                  `${tc.name}(${cut(JSON.stringify(tc.arguments), 40)}) · ${STATUS[status] || status}${c && c.duration_ms != null ? ` · ${duration(c.duration_ms)}` : ""}`,
                );
              }),
            ),
        );
      }
      if (m.role === "tool") {
        return h("div", { class: ["msg", "tool", m.is_error && "err"] }, h("div", { class: "who" }, `${m.name} result`), h("div", { class: "text" }, cut(m.content, 2000)));
      }
      return h("div", { class: "msg" }, h("div", { class: "who" }, m.role), h("div", { class: "text" }, m.content));
    }),
  );
}
