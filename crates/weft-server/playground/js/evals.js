// @ts-check
// Eval runs (`weft eval`): #/evals the user's runs with their pass rates and mean scores,
// #/evals/ID one run's cases with each scorer's verdict and reason and a link to the case's
// session, #/evals/A/compare/B two runs side by side as `weft eval compare` sees them. What is
// shown comes from /evals (the server rebuilds it from the runs' sessions); a run that is not
// over is asked for again every few seconds.

import { api } from "./api.js";
import { h, fill, age, when, cost, count, duration, cut } from "./dom.js";
import { sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["EvalRuns"]} EvalRuns */
/** @typedef {import("./api-types").components["schemas"]["EvalRun"]} EvalRun */
/** @typedef {import("./api-types").components["schemas"]["EvalRunView"]} EvalRunView */
/** @typedef {import("./api-types").components["schemas"]["EvalComparison"]} EvalComparison */
/** @typedef {import("./api-types").components["schemas"]["EvalCaseResult"]} EvalCaseResult */
/** @typedef {import("./api-types").components["schemas"]["EvalCaseChange"]} EvalCaseChange */
/** @typedef {import("./api-types").components["schemas"]["EvalSide"]} EvalSide */
/** @typedef {import("./api-types").components["schemas"]["EvalScore"]} EvalScore */

const POLL_MS = 3000;

/** "83%" */
function pct(x) {
  return `${Math.round((x || 0) * 100)}%`;
}

/** The last part of a path (the dataset's file name). */
function base(path) {
  return path ? path.split(/[\\/]/).pop() || path : "";
}

/** A pass or fail mark, said in words too. */
function verdict(pass) {
  return h("span", { class: ["badge", pass ? "completed" : "failed"] }, pass ? "pass" : "fail");
}

/** A pass rate as a bar with its figure. */
function rateBar(passed, n) {
  const rate = n ? passed / n : 0;
  const fillBar = h("span", {});
  // Set through the style object: the page's CSP refuses style attributes.
  fillBar.style.width = `${Math.round(rate * 100)}%`;
  return h(
    "span",
    { class: ["rate", passed < n ? "some-failed" : ""], title: `${passed} of ${n} passed` },
    h("span", { class: "rate-bar", "aria-hidden": "true" }, fillBar),
    `${passed}/${n}`,
  );
}

/** Where the run came from: agents, dataset, when. */
function runMeta(run) {
  return h(
    "div",
    { class: "s-meta" },
    h("span", {}, "agent ", h("b", { class: "mono" }, run.agents.join(", ") || "—")),
    run.dataset && h("span", { title: run.dataset }, "dataset ", h("b", { class: "mono" }, base(run.dataset))),
    h("time", { datetime: run.created_at, title: when(run.created_at) }, `started ${age(run.created_at)}`),
    run.running > 0 && h("span", { class: "badge running" }, `${run.running} running`),
  );
}

/** The run's totals: cases and sessions passed, pass@k, tokens, cost. */
function runStats(run) {
  const s = run.summary;
  const k = s.repeat;
  return h(
    "div",
    { class: "stats" },
    h("span", {}, h("b", {}, `${s.cases_passed}/${s.cases}`), " cases passed"),
    h("span", {}, h("b", {}, `${s.sessions.passed}/${s.sessions.n}`), " sessions passed (", pct(s.sessions.pass_rate), ")"),
    k > 1 && h("span", {}, `pass@${k} `, h("b", {}, s.pass_at_k.toFixed(2)), ` · pass^${k} `, h("b", {}, s.pass_all_k.toFixed(2))),
    h("span", {}, "mean score ", h("b", {}, s.sessions.score_mean.toFixed(2))),
    h("span", {}, h("b", {}, count(s.tokens)), " tokens"),
    s.cost_usd !== undefined && s.cost_usd !== null && h("span", {}, h("b", {}, cost(s.cost_usd))),
  );
}

/** Each scorer's pass rate and mean score. */
function scorerTable(run) {
  const rows = Object.entries(run.summary.per_scorer);
  if (!rows.length) return h("p", { class: "muted" }, "No verdict is recorded yet.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "etable", id: "eval-scorers" },
      h("caption", { class: "sr-only" }, "Scorers"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Scorer"), h("th", { scope: "col" }, "Passed"), h("th", { scope: "col" }, "Mean score (sd)"))),
      h(
        "tbody",
        {},
        rows.map(([name, st]) =>
          h(
            "tr",
            { dataset: { scorer: name } },
            h("th", { scope: "row", class: "mono" }, name),
            h("td", {}, rateBar(st.passed, st.n)),
            h("td", { class: "num" }, `${st.score_mean.toFixed(2)} (${st.score_stdev.toFixed(2)})`),
          ),
        ),
      ),
    ),
  );
}

/** Polls `load` while `busy(data)` says the run is not over; `show` draws each answer. */
class Poller {
  /** @param {() => Promise<any>} load @param {(data: any) => void} show @param {(e: unknown) => void} fail @param {(data: any) => boolean} busy */
  constructor(load, show, fail, busy) {
    this.load = load;
    this.show = show;
    this.fail = fail;
    this.busy = busy;
    this.timer = 0;
    this.stopped = false;
    this.ctl = new AbortController();
  }

  async tick() {
    let data;
    try {
      data = await this.load();
    } catch (e) {
      if (this.stopped) return;
      this.fail(e);
      this.timer = setTimeout(() => this.tick(), POLL_MS * 2);
      return;
    }
    if (this.stopped) return;
    this.show(data);
    if (this.busy(data)) this.timer = setTimeout(() => this.tick(), POLL_MS);
  }

  stop() {
    this.stopped = true;
    this.ctl.abort();
    clearTimeout(this.timer);
  }
}

function failBox(root, what) {
  return (e) => {
    if (e instanceof Error && e.name === "AbortError") return;
    fill(root, h("div", { class: "alert bad", role: "alert" }, h("h2", {}, what), h("p", {}, sayApiError(e, what))));
  };
}

/** The Evals views; `destroy()` stops their requests. */
export class EvalsPage {
  /** @param {HTMLElement} root @param {{ run?: string, a?: string, b?: string }} what @param {(hash: string) => void} go */
  constructor(root, what, go) {
    this.root = root;
    this.what = what;
    this.go = go;
    /** @type {Poller | null} */
    this.poller = null;
  }

  mount() {
    const { run, a, b } = this.what;
    if (a && b) this.compare(a, b);
    else if (run) this.run(run);
    else this.list();
    this.poller?.tick();
  }

  destroy() {
    this.poller?.stop();
    this.poller = null;
  }

  // --- #/evals ---------------------------------------------------------------------------------

  list() {
    const body = h("div", { id: "evals-body" }, h("p", { class: "muted" }, "Loading the eval runs…"));
    fill(
      this.root,
      h(
        "div",
        { class: "s-head" },
        h("div", { class: "s-title" }, h("h1", { tabindex: -1 }, "Eval runs")),
        h(
          "p",
          { class: "muted" },
          "Runs of ",
          h("code", {}, "weft eval"),
          " whose sessions are yours (run it with ",
          h("code", {}, "--user"),
          " or ",
          h("code", {}, "WEFT_USER"),
          " set to your user). Open a run for its cases; tick two runs to compare them.",
        ),
      ),
      body,
    );
    this.poller = new Poller(
      () => api("/evals", { signal: this.poller?.ctl.signal }),
      (/** @type {EvalRuns} */ data) => this.drawList(body, data),
      failBox(body, "The eval runs could not be listed"),
      (/** @type {EvalRuns} */ data) => data.runs.some((r) => r.running > 0),
    );
  }

  /** @param {HTMLElement} body @param {EvalRuns} data */
  drawList(body, data) {
    if (!data.runs.length) {
      fill(
        body,
        h(
          "div",
          { class: "empty", id: "evals-empty" },
          h("p", {}, "No eval run of yours in this store yet."),
          h("pre", {}, "WEFT_USER=<your user> weft --db <this server's --db> eval AGENT.yaml DATASET.yaml"),
        ),
      );
      return;
    }
    const picked = new Set(/** @type {string[]} */ ([...body.querySelectorAll("input.pick:checked")].map((i) => /** @type {HTMLInputElement} */ (i).value)));
    const compareButton = h("button", { type: "button", class: "button", id: "evals-compare", disabled: true }, "Compare the two ticked runs");
    const update = () => {
      const ticked = [...body.querySelectorAll("input.pick:checked")].map((i) => /** @type {HTMLInputElement} */ (i).value);
      compareButton.toggleAttribute("disabled", ticked.length !== 2);
      compareButton.dataset.runs = ticked.join(" ");
    };
    compareButton.addEventListener("click", () => {
      const ticked = [...body.querySelectorAll("input.pick:checked")].map((i) => /** @type {HTMLInputElement} */ (i).value);
      if (ticked.length !== 2) return;
      // The older run is A, the newer B: regressions are what B lost.
      const order = data.runs.map((r) => r.id);
      ticked.sort((x, y) => order.indexOf(y) - order.indexOf(x));
      this.go(`#/evals/${encodeURIComponent(ticked[0])}/compare/${encodeURIComponent(ticked[1])}`);
    });
    fill(
      body,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "etable", id: "eval-runs" },
          h("caption", { class: "sr-only" }, "Eval runs, newest first"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Compare")),
              h("th", { scope: "col" }, "Run"),
              h("th", { scope: "col" }, "Agent · dataset"),
              h("th", { scope: "col" }, "Started"),
              h("th", { scope: "col" }, "Cases passed"),
              h("th", { scope: "col" }, "Failed"),
              h("th", { scope: "col" }, "Mean scores"),
            ),
          ),
          h("tbody", {}, data.runs.map((r) => this.runRow(r, picked.has(r.id), update))),
        ),
      ),
      h("div", { class: "row evals-actions" }, compareButton),
    );
    update();
  }

  /** @param {EvalRun} r @param {boolean} picked @param {() => void} update */
  runRow(r, picked, update) {
    const s = r.summary;
    const failed = s.cases - s.cases_passed;
    return h(
      "tr",
      { class: "eval-run", dataset: { run: r.id } },
      h("td", {}, h("input", { type: "checkbox", class: "pick", value: r.id, checked: picked, "aria-label": `Compare ${r.id}`, onchange: update })),
      h("th", { scope: "row" }, h("a", { href: `#/evals/${encodeURIComponent(r.id)}`, class: "mono run-link" }, r.id), r.running > 0 && h("span", { class: "badge running" }, "running")),
      h("td", {}, h("span", { class: "mono" }, r.agents.join(", ")), r.dataset && h("span", { class: "muted", title: r.dataset }, ` · ${base(r.dataset)}`)),
      h("td", {}, h("time", { datetime: r.created_at, title: when(r.created_at) }, age(r.created_at))),
      h("td", { class: "cases-passed" }, rateBar(s.cases_passed, s.cases)),
      h("td", { class: ["num", failed ? "bad-text" : ""] }, String(failed)),
      h(
        "td",
        { class: "scorer-means" },
        Object.entries(s.per_scorer).map(([name, st]) => h("span", { class: ["chip", "mono", st.passed < st.n ? "chip-bad" : ""], title: `${name}: ${st.passed}/${st.n} passed` }, `${name} ${st.score_mean.toFixed(2)}`)),
      ),
    );
  }

  // --- #/evals/ID ------------------------------------------------------------------------------

  /** @param {string} id */
  run(id) {
    const body = h("div", { id: "eval-body" }, h("p", { class: "muted" }, "Loading the run…"));
    this.failedOnly = false;
    fill(this.root, h("p", {}, h("a", { href: "#/evals" }, "← Eval runs")), body);
    this.poller = new Poller(
      () => api(`/evals/${encodeURIComponent(id)}`, { signal: this.poller?.ctl.signal }),
      (/** @type {EvalRunView} */ data) => this.drawRun(body, data),
      failBox(body, `Eval run ${id} could not be shown`),
      (/** @type {EvalRunView} */ data) => data.run.running > 0,
    );
  }

  /** @param {HTMLElement} body @param {EvalRunView} data */
  drawRun(body, data) {
    const run = data.run;
    const cases = h("tbody", {});
    const draw = () =>
      fill(
        cases,
        data.results.filter((r) => !this.failedOnly || !r.pass).map((r) => this.caseRow(r, run.summary.repeat)),
      );
    const only = h("input", {
      type: "checkbox",
      id: "eval-failed-only",
      checked: this.failedOnly,
      onchange: () => {
        this.failedOnly = only.checked;
        draw();
      },
    });
    draw();
    fill(
      body,
      h(
        "div",
        { class: "s-head" },
        h("div", { class: "s-title" }, h("h1", { tabindex: -1, id: "eval-title" }, "Eval run ", h("span", { class: "mono" }, run.id))),
        runMeta(run),
        runStats(run),
      ),
      h(
        "div",
        { class: "stack" },
        h("section", { class: "panel", "aria-labelledby": "eval-scorers-h" }, h("div", { class: "panel-head" }, h("h2", { id: "eval-scorers-h" }, "Scorers")), h("div", { class: "panel-body" }, scorerTable(run))),
        h(
          "section",
          { class: "panel", "aria-labelledby": "eval-cases-h" },
          h(
            "div",
            { class: "panel-head" },
            h("h2", { id: "eval-cases-h" }, "Cases"),
            h("span", { class: "spacer" }),
            h("label", { class: "check" }, only, "Failed only"),
          ),
          h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              { class: "etable", id: "eval-cases" },
              h("caption", { class: "sr-only" }, "Each case's session: its verdict, each scorer's verdict and why, and the session"),
              h(
                "thead",
                {},
                h(
                  "tr",
                  {},
                  h("th", { scope: "col" }, "Case"),
                  h("th", { scope: "col" }, "Verdict"),
                  h("th", { scope: "col" }, "Scorers"),
                  h("th", { scope: "col" }, "Answer"),
                  h("th", { scope: "col" }, "Used"),
                  h("th", { scope: "col" }, "Session"),
                ),
              ),
              cases,
            ),
          ),
        ),
      ),
    );
  }

  /** @param {EvalCaseResult} r @param {number} k */
  caseRow(r, k) {
    const used = r.used;
    return h(
      "tr",
      { class: ["eval-case", r.pass ? "pass" : "fail"], dataset: { case: r.case, pass: String(r.pass) } },
      h("th", { scope: "row", class: "mono" }, r.case, k > 1 && h("span", { class: "faint" }, ` #${r.repeat}`)),
      h("td", {}, verdict(r.pass), h("div", { class: "muted small" }, r.score.toFixed(2))),
      h(
        "td",
        {},
        r.error && h("div", { class: "callout bad" }, r.error),
        h("ul", { class: "verdicts" }, r.scores.map((s) => this.scoreItem(s))),
      ),
      h("td", { class: "answer-cell" }, r.status && h("span", { class: "pill" }, r.status.replace("_", " ")), " ", r.answer ? cut(r.answer, 160) : h("span", { class: "faint" }, "(no answer)")),
      h("td", { class: "small used" }, `${count(used.input_tokens + used.output_tokens)} tokens`, h("br"), duration(used.latency_ms), used.cost_usd !== undefined && used.cost_usd !== null && [h("br"), cost(used.cost_usd)]),
      h("td", {}, h("a", { class: "session-link mono", href: `#/s/${encodeURIComponent(r.session)}`, title: "Open the case's session" }, "session")),
    );
  }

  /** @param {EvalScore} s */
  scoreItem(s) {
    return h(
      "li",
      { class: ["verdict", s.pass ? "pass" : "fail"], dataset: { scorer: s.scorer } },
      h("span", { class: s.pass ? "ok-text" : "bad-text", "aria-hidden": "true" }, s.pass ? "✓ " : "✗ "),
      h("span", { class: "mono" }, s.scorer),
      h("span", { class: "sr-only" }, s.pass ? " passed" : " failed"),
      s.score !== 0 && s.score !== 1 && h("span", { class: "muted" }, ` ${s.score.toFixed(2)}`),
      s.detail && h("div", { class: "reason" }, s.detail),
      s.reasoning && h("div", { class: "reason" }, s.reasoning),
    );
  }

  // --- #/evals/A/compare/B ---------------------------------------------------------------------

  /** @param {string} a @param {string} b */
  compare(a, b) {
    const body = h("div", { id: "eval-compare-body" }, h("p", { class: "muted" }, "Comparing…"));
    fill(this.root, h("p", {}, h("a", { href: "#/evals" }, "← Eval runs")), body);
    this.poller = new Poller(
      () => api(`/evals/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`, { signal: this.poller?.ctl.signal }),
      (/** @type {EvalComparison} */ data) => this.drawCompare(body, data),
      failBox(body, `Runs ${a} and ${b} could not be compared`),
      (/** @type {EvalComparison} */ data) => data.a.running > 0 || data.b.running > 0,
    );
  }

  /** @param {HTMLElement} body @param {EvalComparison} data */
  drawCompare(body, data) {
    const regressed = data.cases.filter((c) => c.verdict === "regressed").length;
    const side = (label, run) =>
      h(
        "div",
        { class: "panel compare-side" },
        h("div", { class: "panel-head" }, h("h2", {}, `${label} · `, h("a", { class: "mono", href: `#/evals/${encodeURIComponent(run.id)}` }, run.id))),
        h("div", { class: "panel-body" }, runMeta(run), runStats(run)),
      );
    fill(
      body,
      h(
        "div",
        { class: "s-head" },
        h("div", { class: "s-title" }, h("h1", { tabindex: -1 }, "Compare ", h("span", { class: "mono" }, data.a.id), " → ", h("span", { class: "mono" }, data.b.id))),
        h("p", { class: regressed ? "bad-text" : "muted", id: "compare-verdict" }, regressed ? `${regressed} case${regressed === 1 ? "" : "s"} regressed in B.` : "No case regressed in B."),
      ),
      h("div", { class: "compare-sides" }, side("A", data.a), side("B", data.b)),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "etable", id: "eval-compare" },
          h("caption", { class: "sr-only" }, "Each case in run A and run B, regressions first"),
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Case"), h("th", { scope: "col" }, "What happened"), h("th", { scope: "col" }, "A"), h("th", { scope: "col" }, "B"), h("th", { scope: "col" }, "Changes"))),
          h("tbody", {}, data.cases.map((c) => this.changeRow(c))),
        ),
      ),
    );
  }

  /** @param {EvalCaseChange} c */
  changeRow(c) {
    /** @param {EvalSide | null | undefined} s */
    const cell = (s) =>
      s
        ? h(
            "td",
            {},
            rateBar(s.passed, s.n),
            s.failed.length > 0 && h("div", { class: "small bad-text" }, `failed: ${s.failed.join(", ")}`),
            h("div", {}, h("a", { class: "session-link mono small", href: `#/s/${encodeURIComponent(s.session)}` }, "session")),
          )
        : h("td", { class: "faint" }, "—");
    return h(
      "tr",
      { class: ["eval-change", `v-${c.verdict}`], dataset: { case: c.case, verdict: c.verdict } },
      h("th", { scope: "row", class: "mono" }, c.case),
      h("td", {}, h("span", { class: ["badge", { regressed: "failed", removed: "failed", improved: "completed", added: "completed", changed: "waiting_for_user", same: "" }[c.verdict]] }, c.verdict)),
      cell(c.a),
      cell(c.b),
      h("td", {}, c.changes.length ? h("ul", { class: "verdicts" }, c.changes.map((l) => h("li", {}, l))) : h("span", { class: "faint" }, "nothing")),
    );
  }
}
