// @ts-check
// The session on one time axis, from its events: the model's calls (each from the event before
// its reply to the reply), the waves with their steps' tool calls (and the waits before a
// retry), and the waits for a person. Every bar but a wait's is a button: a step's tool call
// selects its step in the plan, a tool call of no step (a ReAct session's) opens its card in the
// Tool calls tab, a model call opens it in the inspector.

import { h, duration } from "./dom.js";

/** @typedef {import("./api-types").components["schemas"]["StoredEvent"]} StoredEvent */
/** @typedef {import("./api-types").components["schemas"]["Usage"]} Usage */
/** @typedef {{ from: number, to: number | null, kind: string, label: string, step?: string | null, call?: number, callId?: string, open?: boolean }} Bar */

/** @typedef {{ tokens: number, cost: number | null }} Spent */

/**
 * What the model calls of a session used, per wave (its steps' executors and the review after
 * it) and per step (the calls made for that step alone): fed the events in order with `see`.
 * The timeline's wave rows and the plan's nodes and wave headers read the same figures.
 */
export class Spend {
  constructor() {
    /** @type {Map<number, Spent>} */
    this.waves = new Map();
    /** @type {Map<string, Spent>} */
    this.steps = new Map();
    /** @type {Map<string, number>} */
    this.stepWave = new Map();
    /** The wave that ended last: the review after it is counted to it. */
    this.lastWave = null;
  }

  /** @param {StoredEvent} stored */
  see(stored) {
    /** @type {any} */
    const e = stored;
    if (e.type === "wave_started") for (const s of e.steps || []) this.stepWave.set(s, e.wave);
    else if (e.type === "wave_finished") this.lastWave = e.wave;
    else if (e.type === "model_replied" || e.type === "model_failed") {
      const u = e.type === "model_failed" ? e.usage : e.reply?.usage;
      if (!u) return;
      const wave = e.step ? this.stepWave.get(e.step) : e.purpose === "review" ? this.lastWave : undefined;
      if (wave !== undefined && wave !== null) add(this.waves, wave, u);
      if (e.step) add(this.steps, e.step, u);
    }
  }
}

/** @param {Map<any, Spent>} map @param {any} key @param {Usage} u */
function add(map, key, u) {
  const s = map.get(key) || { tokens: 0, cost: null };
  s.tokens += (u.input_tokens || 0) + (u.output_tokens || 0);
  if (u.cost_usd !== null && u.cost_usd !== undefined) s.cost = (s.cost || 0) + u.cost_usd;
  map.set(key, s);
}

/** What `events` used, per wave and per step (see `Spend`). @param {StoredEvent[]} events */
export function spending(events) {
  const s = new Spend();
  for (const e of events) s.see(e);
  return s;
}

/** The rows of the timeline: groups of labelled rows, each with its bars
 * `{from, to, kind, label, step, open}` (times in ms since the epoch).
 * @param {StoredEvent[]} events
 * @param {number} [now]
 */
export function timelineRows(events, now = Date.now()) {
  const model = { title: "Model", rows: new Map() };
  const people = { title: "Waiting for you", rows: new Map() };
  const waves = new Map();
  const stepWave = new Map();
  const calls = new Map();
  const row = (group, key, label) => {
    if (!group.rows.has(key)) group.rows.set(key, { label, bars: [] });
    return group.rows.get(key);
  };
  let prev = null;
  // Model calls are numbered as the inspector numbers them: replies and failures, in order.
  let modelCalls = 0;
  const spend = new Spend();
  /** @type {Bar | null} */
  let waiting = null;
  for (const stored of events) {
    const ts = Number(stored.ts);
    // Each event type's own fields are not in the API's schema (`StoredEvent` names the envelope).
    /** @type {any} */
    const e = stored;
    spend.see(stored);
    switch (stored.type) {
      case "model_replied":
      case "model_failed":
        modelCalls += 1;
        if (prev !== null) {
          const failed = e.type === "model_failed";
          row(model, e.purpose, e.purpose).bars.push({ from: prev, to: ts, kind: failed ? "rejected" : "model", label: `${e.purpose}${failed ? " (failed)" : ""}${usage(failed ? e.usage : e.reply?.usage)}`, call: modelCalls });
        }
        break;
      case "model_reply_rejected": {
        // The reply of the last call was refused: its bar says so.
        const bars = model.rows.get(e.purpose)?.bars;
        const last = bars && bars[bars.length - 1];
        if (last) {
          last.kind = "rejected";
          last.label += " (refused)";
        }
        break;
      }
      case "wave_started": {
        const w = { title: `Wave ${e.wave}`, from: ts, to: null, rows: new Map(), tokens: 0, cost: null };
        waves.set(e.wave, w);
        for (const s of e.steps || []) {
          stepWave.set(s, e.wave);
          row(w, s, s);
        }
        break;
      }
      case "wave_finished": {
        const w = waves.get(e.wave);
        if (w) w.to = ts;
        break;
      }
      case "tool_call_started": {
        const w = waves.get(stepWave.get(e.step));
        const target = w ? row(w, e.step, e.step) : row(model, `tool:${e.tool}`, e.tool);
        /** @type {Bar} */
        const bar = { from: ts, to: null, kind: "call", label: `${e.tool}${e.attempt > 1 ? ` · attempt ${e.attempt}` : ""}`, step: e.step || null, callId: e.call_id };
        target.bars.push(bar);
        calls.set(e.call_id, bar);
        break;
      }
      case "tool_call_finished": {
        const bar = calls.get(e.call_id);
        if (bar) {
          bar.to = ts;
          bar.kind = e.outcome?.status === "ok" ? "call" : "call-bad";
          bar.label += ` · ${e.outcome?.status || ""} · ${duration(e.duration_ms)}`;
        }
        break;
      }
      case "step_retrying": {
        const w = waves.get(stepWave.get(e.step));
        if (w) row(w, e.step, e.step).bars.push({ from: ts, to: ts + Number(e.delay_ms || 0), kind: "retry", label: `retry in ${duration(e.delay_ms)}`, step: e.step });
        break;
      }
      case "waiting_for_user":
        waiting = { from: ts, to: null, kind: "wait", label: e.request?.kind || "waiting" };
        row(people, "wait", "you").bars.push(waiting);
        break;
      case "user_replied":
      case "run_finished":
        if (waiting) waiting.to = ts;
        waiting = null;
        break;
      default:
        break;
    }
    prev = ts;
  }
  const end = prev ?? now;
  for (const [wave, w] of waves) Object.assign(w, spend.waves.get(wave) || {});
  const groups = [model, ...[...waves.values()], people].filter((g) => g.rows.size);
  for (const g of groups) {
    for (const r of g.rows.values()) {
      for (const b of r.bars) {
        b.open = b.to === null;
        if (b.to === null) b.to = end;
      }
    }
  }
  return { groups, from: events.length ? Number(events[0].ts) : now, to: end };
}

/** " · 944 tokens · $0.0002": what a wave's model calls (its steps' executors and the review
 * after it) used, or "". */
function waveUsage(g) {
  if (!g.tokens) return "";
  return ` · ${g.tokens.toLocaleString()} tokens${g.cost ? ` · $${g.cost.toFixed(4)}` : ""}`;
}

/** @param {Usage | undefined} u */
function usage(u) {
  if (!u) return "";
  const t = (u.input_tokens || 0) + (u.output_tokens || 0);
  return t ? ` · ${t.toLocaleString()} tokens${u.cost_usd ? ` · $${u.cost_usd.toFixed(4)}` : ""}` : "";
}

/**
 * The timeline as an element. `selected`: the step chosen in the plan; `onSelect(step)`; a tool
 * call of no step opens its card (`onCall(call_id)`); a model call's bar opens it in the
 * inspector (`onInspect(n)`).
 * @param {StoredEvent[]} events
 * @param {{ selected: string | null, onSelect: (step: string) => void, onCall?: (id: string) => void, onInspect?: (n: number) => void }} options
 */
export function timeline(events, { selected, onSelect, onCall, onInspect }) {
  const { groups, from, to } = timelineRows(events);
  if (!groups.length) return h("p", { class: "muted" }, "Nothing has happened yet.");
  const span = Math.max(1, to - from);
  const pct = (t) => `${(((t - from) / span) * 100).toFixed(3)}%`;
  const width = (a, b) => `${Math.max(0.4, ((b - a) / span) * 100).toFixed(3)}%`;
  // Positions are set through the style object: the page's CSP refuses style attributes.
  const at = (el, left, w) => {
    el.style.left = left;
    if (w) el.style.width = w;
    return el;
  };
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => at(h("span", { class: "tl-tick" }, duration(Math.round(f * span))), `${f * 100}%`));
  return h(
    "div",
    { class: "timeline-view", id: "timeline", role: "group", "aria-label": `Timeline: ${duration(span)}` },
    h("div", { class: "tl-row tl-axis" }, h("span", { class: "tl-label" }), h("span", { class: "tl-track" }, ticks)),
    groups.map((g) =>
      h(
        "div",
        { class: "tl-group", dataset: { group: g.title } },
        h(
          "div",
          { class: "tl-row tl-head" },
          h("span", { class: "tl-label" }, g.title),
          h(
            "span",
            { class: "tl-track" },
            g.from !== undefined && at(h("span", { class: "tl-bar wave", title: `${g.title}: ${duration((g.to ?? to) - g.from)}${waveUsage(g)}` }), pct(g.from), width(g.from, g.to ?? to)),
            g.tokens ? h("span", { class: "tl-usage", dataset: { tokens: String(g.tokens) } }, waveUsage(g).slice(3)) : null,
          ),
        ),
        [...g.rows.entries()].map(([key, r]) =>
          h(
            "div",
            { class: ["tl-row", selected && key === selected && "selected"], dataset: { row: key } },
            h("span", { class: "tl-label mono" }, r.label),
            h(
              "span",
              { class: "tl-track" },
              r.bars.map((b) => {
                const attrs = {
                  class: ["tl-bar", b.kind, b.open && "open"],
                  title: `${b.label} · ${duration(b.to - b.from)}${b.open ? " (still going)" : ""}`,
                  dataset: { from: String(b.from), to: String(b.to), step: b.step || "" },
                };
                const call = b.call;
                const callId = b.callId;
                const el = b.step
                  ? h("button", { ...attrs, type: "button", "aria-label": `${b.step}: ${b.label}`, onclick: () => onSelect(b.step) })
                  : callId && onCall
                  ? h("button", { ...attrs, type: "button", dataset: { ...attrs.dataset, callId }, "aria-label": `Show the call of ${b.label}`, onclick: () => onCall(callId) })
                  : call && onInspect
                    ? h("button", { ...attrs, type: "button", dataset: { ...attrs.dataset, call: String(call) }, "aria-label": `Inspect model call ${call}: ${b.label}`, onclick: () => onInspect(call) })
                    : h("span", attrs);
                return at(el, pct(b.from), width(b.from, b.to));
              }),
            ),
          ),
        ),
      ),
    ),
  );
}
