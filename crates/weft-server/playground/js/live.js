// @ts-check
// A running plan's session brought up to date in the page from its event stream, instead of
// fetching `GET /sessions/{id}` again after each burst of events: `applyEvent` folds into the
// view what the server's fold (crates/weft-server/src/view.rs) makes of the events of a wave
// (waves, steps, tool calls, the model calls that review and carry out steps, reviews). Any
// other event, an event out of order, or a view that is not a running plan's returns false: the
// page then fetches the view whole (it also does at the open, on a gap and at the run's end).

/** @typedef {import("./api-types").components["schemas"]["SessionView"]} SessionView */
/** @typedef {import("./api-types").components["schemas"]["StoredEvent"]} StoredEvent */
/** @typedef {import("./api-types").components["schemas"]["PlanGraph"]} PlanGraph */

/** The times the view writes: seconds, UTC ("2026-01-02T03:04:05Z"). @param {number} ms */
function at(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** @param {any} sum @param {any} u */
function addUsage(sum, u) {
  sum.input_tokens = (sum.input_tokens || 0) + (u.input_tokens || 0);
  sum.output_tokens = (sum.output_tokens || 0) + (u.output_tokens || 0);
  for (const k of ["cache_read_tokens", "cache_write_tokens"]) if (u[k]) sum[k] = (sum[k] || 0) + u[k];
  const a = sum.cost_usd ?? null;
  const b = u.cost_usd ?? null;
  if (a !== null || b !== null) sum.cost_usd = (a || 0) + (b || 0);
  if (u.usage_estimated) sum.usage_estimated = true;
}

/** Sets `value` at a `†state.a.b` output path in `data`; false for a path it cannot follow.
 * @param {any} data @param {unknown} path @param {unknown} value */
function setState(data, path, value) {
  if (typeof path !== "string" || !/^†state(\.[A-Za-z_][A-Za-z0-9_]*)+$/.test(path)) return false;
  const keys = path.split(".").slice(1);
  let o = data;
  for (const k of keys.slice(0, -1)) {
    if (o[k] === null || typeof o[k] !== "object" || Array.isArray(o[k])) o[k] = {};
    o = o[k];
  }
  o[keys[keys.length - 1]] = value;
  return true;
}

/**
 * The waves of the steps that have not run: one after the latest of their dependencies and
 * after the waves that ran, as the server places them.
 * @param {PlanGraph} plan
 */
function project(plan) {
  const last = Math.max(0, ...plan.waves.map((w) => w.wave));
  const deps = new Map(plan.nodes.map((n) => [n.id, /** @type {string[]} */ ([])]));
  for (const e of plan.edges) deps.get(e.to)?.push(e.from);
  const byId = new Map(plan.nodes.map((n) => [n.id, n]));
  const done = new Set();
  /** @param {any} n */
  const place = (n, depth = 0) => {
    if (done.has(n.id) || depth > plan.nodes.length) return;
    done.add(n.id);
    const ds = /** @type {any[]} */ ((deps.get(n.id) || []).map((d) => byId.get(d)).filter(Boolean));
    for (const d of ds) place(d, depth + 1);
    if (n.projected) n.wave = Math.max(last, ...ds.map((d) => d.wave)) + 1;
  };
  for (const n of plan.nodes) place(n);
}

/**
 * Applies `env` to `view` (the latest view of a running plan); false when it cannot, and the
 * view must be fetched again.
 * @param {SessionView} view
 * @param {StoredEvent} env
 */
export function applyEvent(view, env) {
  const plan = view.plan;
  if (view.mode !== "plan" || !plan || plan.proposed || view.status !== "running") return false;
  if (env.seq !== view.last_seq + 1) return false;
  /** @type {any} the event's own fields are not in the API's schema */
  const e = env;
  const node = e.step ? plan.nodes.find((n) => n.id === e.step) : undefined;
  if (e.step && !node && e.type !== "tool_call_started") return false;
  const when = at(Number(env.ts));
  /** @type {any} */
  const v = view;
  switch (e.type) {
    case "wave_started": {
      for (const id of e.steps || []) {
        const n = plan.nodes.find((x) => x.id === id);
        if (!n) return false;
        n.wave = e.wave;
        n.projected = false;
      }
      plan.waves = plan.waves.filter((w) => w.wave !== e.wave);
      plan.waves.push({ wave: e.wave, seq: env.seq, finished: false });
      plan.waves.sort((a, b) => a.wave - b.wave);
      plan.open_wave = e.wave;
      project(plan);
      break;
    }
    case "wave_finished": {
      const w = plan.waves.find((x) => x.wave === e.wave);
      if (w) w.finished = true;
      plan.open_wave = null;
      plan.finished = true;
      v.phase = "reviewing";
      break;
    }
    case "step_started":
      if (!node) return false;
      node.status = "RUNNING";
      node.attempts = e.attempt;
      node.retrying = false;
      break;
    case "step_retrying": {
      if (!node) return false;
      node.retrying = true;
      node.error = e.error;
      const card = [...view.calls].reverse().find((c) => c.step === e.step);
      if (card) card.retry = { next_attempt: e.attempt + 1, in_ms: e.delay_ms, error: e.error };
      break;
    }
    case "step_completed": {
      if (!node) return false;
      const out = /** @type {any} */ (node.call)?._outputPath;
      if (out !== undefined && !setState(view.data ?? (view.data = {}), out, e.output)) return false;
      node.status = "COMPLETED";
      node.output = e.output;
      node.error = null;
      break;
    }
    case "step_failed":
      // A failure sent to an error path writes the state where the server knows it.
      if (!node || e.handled) return false;
      node.status = "FAILED";
      node.error = e.error;
      node.handled = false;
      break;
    case "step_skipped":
      if (!node) return false;
      node.status = "SKIPPED";
      node.reason = e.reason;
      break;
    case "tool_call_started": {
      // A fan-out's items are the server's to count.
      if (e.item !== undefined && e.item !== null) return false;
      view.calls.push({ seq: env.seq, at: when, call_id: e.call_id, step: e.step ?? null, tool: e.tool, args: e.args, attempt: e.attempt, status: "running", outcome: null, duration_ms: null, retry: null, reason: null });
      node?.calls.push(e.call_id);
      v.tool_calls += 1;
      for (const s of [v.spending.run, v.spending.session]) {
        s.tool_calls += 1;
        s.per_tool[e.tool] = (s.per_tool[e.tool] || 0) + 1;
      }
      break;
    }
    case "tool_call_finished": {
      const card = view.calls.find((c) => c.call_id === e.call_id);
      if (card) {
        const o = e.outcome || {};
        card.status = o.status === "ok" ? "ok" : o.error?.kind === "unknown_outcome" ? "unknown_outcome" : "error";
        card.outcome = o;
        card.duration_ms = e.duration_ms;
      }
      break;
    }
    case "model_replied":
    case "model_failed": {
      // The reviews and step executors of a running plan; a plan, an answer or a check of one
      // changes more than usage.
      if (e.purpose !== "review" && e.purpose !== "execute") return false;
      const u = (e.type === "model_failed" ? e.usage : e.reply?.usage) || {};
      addUsage(v.usage, u);
      if (e.type === "model_replied") v.model_calls += 1;
      for (const s of [v.spending.run, v.spending.session]) {
        s.input_tokens += u.input_tokens || 0;
        s.output_tokens += u.output_tokens || 0;
        s.cost_usd += u.cost_usd || 0;
        s.model_calls += 1;
      }
      break;
    }
    case "review_decided":
      if (e.decision !== "CONTINUE") return false;
      view.reviews.push({ seq: env.seq, at: when, decision: e.decision, reason: e.reason || "" });
      v.phase = "executing";
      plan.finished = false;
      break;
    default:
      return false;
  }
  view.last_seq = env.seq;
  view.seq = env.seq;
  return true;
}
