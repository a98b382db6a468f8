// @ts-check
// Two sessions side by side (#/compare/A/B): task, input, status and totals, each step matched
// with the other session's (a plan's by step id, a workflow's path, otherwise the tool calls in
// order) with what differs marked (the JSON paths of arguments and results too), the answers as
// a word diff, and for a fork the event where the two part. The diff is the server's
// (`GET /sessions/{a}/compare/{b}`); this page draws it. Also the "Compare with…" control a
// session's page shows.

import { api, ApiError } from "./api.js";
import { h, fill, cut, count, cost, duration, age } from "./dom.js";
import { jsonTree } from "./json.js";
import { sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["Comparison"]} Comparison */
/** @typedef {import("./api-types").components["schemas"]["Side"]} Side */
/** @typedef {import("./api-types").components["schemas"]["StepDiff"]} StepDiff */
/** @typedef {import("./api-types").components["schemas"]["StepSide"]} StepSide */
/** @typedef {import("./api-types").components["schemas"]["SessionView"]} SessionView */
/** @typedef {import("./api-types").components["schemas"]["SessionList"]} SessionList */
/** @typedef {import("./api-types").components["schemas"]["Summary"]} Summary */

/** While either session runs, the comparison is asked for again this often. */
const POLL_MS = 2000;

const CHANGE_LABEL = { same: "same", differs: "differs", only_a: "only in A", only_b: "only in B" };
const ALIGNED = {
  plan: "Steps matched by step id.",
  workflow: "The workflows' paths, step by step.",
  calls: "Tool calls matched in order.",
};

/** The comparison page; `destroy()` stops its requests. */
export class ComparePage {
  /** @param {HTMLElement} root @param {string} a @param {string} b */
  constructor(root, a, b) {
    this.root = root;
    this.a = a;
    this.b = b;
    this.ctl = new AbortController();
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
    this.closed = false;
    this.sig = "";
    this.body = h("div", { id: "compare-body" }, h("p", { class: "muted" }, "Comparing…"));
  }

  mount() {
    fill(this.root, h("p", {}, h("a", { href: `#/s/${encodeURIComponent(this.b)}` }, "← Session ", cut(this.b, 14))), this.body);
    this.load();
  }

  destroy() {
    this.closed = true;
    this.ctl.abort();
    clearTimeout(this.timer);
  }

  async load() {
    /** @type {Comparison} */
    let c;
    try {
      c = await api(`/sessions/${encodeURIComponent(this.a)}/compare/${encodeURIComponent(this.b)}`, { signal: this.ctl.signal });
    } catch (e) {
      if (this.closed || (e instanceof Error && e.name === "AbortError")) return;
      const missing = e instanceof ApiError && e.status === 404;
      fill(
        this.body,
        h(
          "div",
          { class: "alert bad", role: "alert" },
          h("h2", {}, missing ? "No such session" : "The sessions could not be compared"),
          h("p", {}, missing ? `${e.detail}. Only your own sessions can be compared.` : sayApiError(e, "Comparing the sessions")),
          h("a", { href: "#/" }, "Back to the sessions"),
        ),
      );
      if (!missing) this.timer = setTimeout(() => this.load(), POLL_MS * 2);
      return;
    }
    if (this.closed) return;
    const sig = JSON.stringify(c);
    if (sig !== this.sig) {
      this.sig = sig;
      this.draw(c);
    }
    if (c.a.status === "running" || c.b.status === "running") this.timer = setTimeout(() => this.load(), POLL_MS);
  }

  /** @param {Comparison} c */
  draw(c) {
    const differs = new Set(c.differs);
    const changed = c.steps.filter((s) => s.change !== "same").length;
    fill(
      this.body,
      h(
        "header",
        { class: "s-head" },
        h(
          "div",
          { class: "s-title" },
          h("h1", { tabindex: -1, id: "compare-title" }, "Compare ", sessionLink(c.a.id), " → ", sessionLink(c.b.id)),
        ),
        forkLine(c),
        h(
          "p",
          { class: changed || differs.size ? "" : "muted", id: "compare-summary" },
          changed ? `${changed} of ${c.steps.length} step${c.steps.length === 1 ? "" : "s"} differ${changed === 1 ? "s" : ""}` : `All ${c.steps.length} step${c.steps.length === 1 ? "" : "s"} alike`,
          differs.has("answer") ? "; the answers differ." : "; the answers are the same.",
        ),
      ),
      h("section", { class: "panel", "aria-labelledby": "compare-head-title" }, h("div", { class: "panel-head" }, h("h2", { id: "compare-head-title" }, "The two sessions")), h("div", { class: "panel-body table-wrap" }, headTable(c, differs))),
      h("section", { class: "panel", "aria-labelledby": "compare-answer-title" }, h("div", { class: "panel-head" }, h("h2", { id: "compare-answer-title" }, "Answers")), h("div", { class: "panel-body" }, answer(c))),
      h(
        "section",
        { class: "panel", "aria-labelledby": "compare-steps-title" },
        h("div", { class: "panel-head" }, h("h2", { id: "compare-steps-title" }, "Steps"), h("span", { class: "muted small" }, ALIGNED[c.aligned_by] || "")),
        h("div", { class: "panel-body table-wrap" }, c.steps.length ? stepsTable(c.steps) : h("p", { class: "muted" }, "Neither session called a tool.")),
      ),
    );
  }
}

/** @param {string} id */
function sessionLink(id) {
  return h("a", { class: "mono", href: `#/s/${encodeURIComponent(id)}`, title: id }, cut(id, 18));
}

/** Where a fork parts from its origin, when one is the other's fork. @param {Comparison} c */
function forkLine(c) {
  const f = c.fork;
  if (!f) return h("p", { class: "muted", id: "compare-fork" }, "Neither session is a fork of the other.");
  return h(
    "p",
    { id: "compare-fork", dataset: { at: String(f.at), event: f.event } },
    `${f.side.toUpperCase()} is a fork of ${f.side === "a" ? "B" : "A"}: they share events 1 to ${f.at} and part after event `,
    h("b", {}, `#${f.at} ${f.event}`),
    ".",
  );
}

/** The header: task, input, status and totals of both, the rows that differ marked.
 * @param {Comparison} c @param {Set<string>} differs */
function headTable(c, differs) {
  const money = (/** @type {number | null | undefined} */ n) => cost(n) || "no cost";
  /** @type {[string, (s: Side) => string][]} */
  const totals = [
    ["input_tokens", (s) => `${count(s.totals.input_tokens)} in`],
    ["output_tokens", (s) => `${count(s.totals.output_tokens)} out`],
    ["cost_usd", (s) => money(s.totals.cost_usd)],
    ["duration_ms", (s) => duration(s.totals.duration_ms)],
    ["model_calls", (s) => `${count(s.totals.model_calls)} model call${s.totals.model_calls === 1 ? "" : "s"}`],
    ["tool_calls", (s) => `${count(s.totals.tool_calls)} tool call${s.totals.tool_calls === 1 ? "" : "s"}`],
  ];
  /** The totals on one line, each that differs marked. @param {Side} s */
  const totalsLine = (s) =>
    totals.map(([key, text], i) => [i > 0 && " · ", h("span", { class: ["cmp-total", differs.has(key) && "cmp-mark"], dataset: { total: key } }, text(s), differs.has(key) && h("span", { class: "sr-only" }, " (differs)"))]);
  /** @type {[string, string, (s: Side) => any][]} */
  const rows = [
    ["agent", "Agent", (s) => `${s.agent}${s.mode ? ` (${s.mode})` : ""}`],
    ["task", "Task", (s) => s.task || "—"],
    ["input", "Input", (s) => jsonTree(s.input, "the input", { marks: c.input_paths })],
    ["status", "Status", (s) => h("span", { class: ["badge", s.status] }, s.status)],
    ["error", "Error", (s) => s.error || "—"],
    ["totals", "Totals", totalsLine],
  ];
  const totalsDiffer = totals.some(([key]) => differs.has(key));
  return h(
    "table",
    { class: "etable cmp-table", id: "compare-head" },
    h("caption", { class: "sr-only" }, "The two sessions' task, input, status and totals; rows that differ are marked"),
    h(
      "thead",
      {},
      h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col" }, "A · ", sessionLink(c.a.id), h("span", { class: "faint small" }, ` ${age(c.a.created_at)}`)), h("th", { scope: "col" }, "B · ", sessionLink(c.b.id), h("span", { class: "faint small" }, ` ${age(c.b.created_at)}`))),
    ),
    h(
      "tbody",
      {},
      rows
        .filter(([key]) => key !== "error" || c.a.error || c.b.error)
        .map(([key, label, cell]) => {
          const d = key === "totals" ? totalsDiffer : differs.has(key);
          return h("tr", { class: ["cmp-field", d && "differs"], dataset: { field: key, differs: d ? "1" : "0" } }, h("th", { scope: "row" }, label, d && h("span", { class: "sr-only" }, " (differs)")), h("td", {}, cell(c.a)), h("td", {}, cell(c.b)));
        }),
    ),
  );
}

/** Each step of both sessions, matched, with what differs marked. @param {StepDiff[]} steps */
function stepsTable(steps) {
  return h(
    "table",
    { class: "etable cmp-table", id: "compare-steps" },
    h("caption", { class: "sr-only" }, "Each step in session A and session B, with what differs"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Step"), h("th", { scope: "col" }, "A"), h("th", { scope: "col" }, "B"))),
    h(
      "tbody",
      {},
      steps.map((s) =>
        h(
          "tr",
          { class: ["cmp-step", `c-${s.change}`], dataset: { key: s.key, change: s.change, differs: s.differs.join(" ") } },
          h(
            "th",
            { scope: "row" },
            h("span", { class: "mono" }, s.key),
            h("div", {}, h("span", { class: ["badge", { same: "", differs: "waiting_for_user", only_a: "failed", only_b: "completed" }[s.change]] }, CHANGE_LABEL[s.change] || s.change)),
            s.differs.length > 0 && h("div", { class: "small muted" }, s.differs.join(", ")),
          ),
          stepCell(s, s.a, "a"),
          stepCell(s, s.b, "b"),
        ),
      ),
    ),
  );
}

/** One side of a step. @param {StepDiff} s @param {StepSide | null | undefined} side @param {"a" | "b"} which */
function stepCell(s, side, which) {
  if (!side) return h("td", { class: "faint cmp-side", dataset: { side: which } }, `not in ${which.toUpperCase()}`);
  const d = new Set(s.differs);
  const same = s.change === "same";
  const part = (/** @type {string} */ name, /** @type {string} */ label, /** @type {unknown} */ value, /** @type {string[]} */ marks) => {
    const tree = jsonTree(value, `${label} of ${s.key} in ${which.toUpperCase()}`, { marks });
    // What is alike in both is folded; what differs is open.
    return h("details", { class: ["cmp-part", `cmp-${name}`, d.has(name) && "differs"], open: !same && d.has(name), dataset: { part: name } }, h("summary", {}, label, d.has(name) && h("span", { class: "cmp-flag" }, " differs")), tree);
  };
  return h(
    "td",
    { class: "cmp-side", dataset: { side: which } },
    h(
      "div",
      { class: "cmp-line" },
      h("span", { class: ["mono", (d.has("tool") || d.has("step")) && "cmp-mark"] }, side.tool || "—"),
      " ",
      h("span", { class: ["badge", side.status.toLowerCase(), d.has("status") && "cmp-mark"], dataset: { status: side.status } }, side.status),
    ),
    part("args", "Arguments", side.args, s.args_paths),
    side.result !== null && side.result !== undefined ? part("result", "Result", side.result, s.result_paths) : h("div", { class: ["faint", "small", d.has("result") && "cmp-mark"] }, "no result"),
  );
}

/** The answers: each in full, and a word diff of the two. @param {Comparison} c */
function answer(c) {
  const d = c.answer;
  if (!d.a && !d.b) return h("p", { class: "muted", id: "compare-answer" }, "Neither session has answered.");
  return h(
    "div",
    {},
    h(
      "p",
      { id: "compare-answer", class: ["cmp-words", d.same && "muted"], dataset: { same: d.same ? "1" : "0" } },
      d.words.map((w, i) => [i > 0 && " ", w.op === "removed" ? h("del", { class: "w-removed", title: "only in A" }, w.text) : w.op === "added" ? h("ins", { class: "w-added", title: "only in B" }, w.text) : h("span", {}, w.text)]),
    ),
    d.same ? h("p", { class: "muted small" }, "Both sessions answered the same.") : h("p", { class: "muted small" }, h("del", { class: "w-removed" }, "struck"), " only in A, ", h("ins", { class: "w-added" }, "underlined"), " only in B."),
  );
}

/**
 * The "Compare with…" control of a session's page: a list of the user's other sessions (a
 * fork's origin first, then this session's forks), and a button that opens the comparison.
 * @param {SessionView} v @param {(hash: string) => void} go
 */
export function compareControl(v, go) {
  const open = /** @type {HTMLButtonElement} */ (h("button", { type: "button", class: "button", id: "compare-open" }, "Compare with…"));
  const box = h("span", { class: "compare-control" }, open);
  open.addEventListener("click", async () => {
    open.disabled = true;
    /** @type {SessionList} */
    let list;
    try {
      list = await api("/sessions?limit=200");
    } catch (e) {
      open.disabled = false;
      box.append(h("span", { class: "bad-text small", role: "alert" }, sayApiError(e, "Listing your sessions")));
      return;
    }
    const forked = /** @type {{ session?: string } | null} */ (v.forked_from);
    const origin = forked?.session || null;
    const others = list.sessions.filter((s) => s.id !== v.id);
    /** @param {Summary} s */
    const rank = (s) => (s.id === origin ? 0 : s.parent_id === v.id ? 1 : s.agent === v.agent ? 2 : 3);
    others.sort((x, y) => rank(x) - rank(y));
    if (origin && !others.some((s) => s.id === origin)) others.unshift(/** @type {Summary} */ ({ id: origin, agent: v.agent, task: "(origin)", status: "", parent_id: null }));
    if (!others.length) {
      fill(box, h("span", { class: "muted small" }, "You have no other session to compare with."));
      return;
    }
    const pick = /** @type {HTMLSelectElement} */ (
      h(
        "select",
      { id: "compare-with", "aria-label": "The session to compare with" },
        others.map((s) => h("option", { value: s.id }, `${s.id === origin ? "origin · " : s.parent_id === v.id ? "fork · " : ""}${cut(s.task || "(no task)", 40)} · ${s.agent} · ${s.status} · ${cut(s.id, 10)}`)),
      )
    );
    const goButton = h("button", { type: "button", class: "button primary", id: "compare-go" }, "Compare");
    goButton.addEventListener("click", () => {
      const other = pick.value;
      // A fork is compared as its origin's B; otherwise this session is A.
      const [a, b] = other === origin ? [other, v.id] : [v.id, other];
      go(`#/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}`);
    });
    fill(box, pick, goButton);
    pick.focus();
  });
  return box;
}
