// @ts-check
// The plan as a graph: one column per wave (the wave a step ran in, or the one it would run in),
// a node per step coloured by its state, an edge per dependency (solid: data read through a
// `†` reference; dashed: `_dependsOn`). Nodes are buttons: Tab reaches them, arrow keys move
// between them, Enter or Space shows a step's details.

import { h, cut, duration } from "./dom.js";

/** @typedef {import("./api-types").components["schemas"]["PlanGraph"]} PlanGraph */
/** @typedef {import("./api-types").components["schemas"]["Node"]} Node */
/** @typedef {import("./api-types").components["schemas"]["Card"]} Card */

const W = 184;
const H = 64;
const GX = 44;
const GY = 16;
const PAD = 8;
const HEAD = 26;

const ICON = {
  COMPLETED: "✓",
  FAILED: "✕",
  RUNNING: "●",
  WAITING_FOR_USER: "?",
  SKIPPED: "⤼",
  PENDING: "○",
  PROPOSED: "◇",
};

/**
 * The class a node's state gives it (a failure sent to an error path is `handled`).
 * @param {Node} node
 */
export function stateClass(node) {
  if (node.status === "FAILED" && node.handled) return "s-handled";
  return `s-${String(node.status || "pending").toLowerCase()}`;
}

/**
 * The short account of a step's state shown on its node.
 * @param {Node} node
 * @param {Map<string, Card>} calls the session's calls by id
 */
export function stateText(node, calls) {
  const last = (node.calls || []).map((id) => calls.get(id)).filter(Boolean).pop();
  switch (node.status) {
    case "PROPOSED":
      return node.description || "proposed";
    case "PENDING":
      return node.retrying ? `retrying (attempt ${node.attempts + 1} next)` : "pending";
    case "RUNNING":
      return node.attempts > 1 ? `running · attempt ${node.attempts}` : "running";
    case "COMPLETED":
      return last && last.duration_ms !== null ? `completed · ${duration(last.duration_ms)}` : "completed";
    case "FAILED":
      return node.handled
        ? `failed → error path (${node.error?.kind || "error"})`
        : `failed: ${node.error?.kind || "error"}`;
    case "SKIPPED":
      return `skipped${node.reason ? `: ${node.reason}` : ""}`;
    case "WAITING_FOR_USER":
      return "waiting for you";
    default:
      return String(node.status || "").toLowerCase();
  }
}

/**
 * Draws `plan` (the `plan` of `GET /sessions/{id}`). `selected`: the step shown in detail;
 * `onSelect(id)`: a node was chosen.
 * @param {PlanGraph} plan
 * @param {Map<string, Card>} calls the session's calls by id
 * @param {{ selected: string | null, onSelect: (id: string) => void }} options
 */
export function drawGraph(plan, calls, { selected, onSelect }) {
  const cols = [...new Set(plan.nodes.map((n) => n.wave))].sort((a, b) => a - b);
  const colOf = new Map(cols.map((w, i) => [w, i]));
  const rows = new Map();
  const pos = new Map();
  for (const n of plan.nodes) {
    const c = colOf.get(n.wave) ?? 0;
    const r = rows.get(c) || 0;
    rows.set(c, r + 1);
    pos.set(n.id, { c, r, x: PAD + c * (W + GX), y: PAD + HEAD + r * (H + GY) });
  }
  const maxRows = Math.max(1, ...rows.values());
  const width = PAD * 2 + Math.max(1, cols.length) * (W + GX) - GX;
  const height = PAD * 2 + HEAD + maxRows * (H + GY) - GY;

  const svg = h("svg:svg", {
    class: "graph",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "group",
    "aria-label": `Plan: ${plan.nodes.length} steps in ${cols.length} waves`,
  });
  svg.appendChild(
    h(
      "svg:defs",
      {},
      h(
        "svg:marker",
        {
          id: "weft-arrow",
          viewBox: "0 0 8 8",
          refX: 7,
          refY: 4,
          markerWidth: 7,
          markerHeight: 7,
          orient: "auto-start-reverse",
        },
        h("svg:path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" }),
      ),
    ),
  );

  // Columns: a band and a label per wave.
  cols.forEach((w, i) => {
    const inCol = plan.nodes.filter((n) => n.wave === w);
    const x = PAD + i * (W + GX);
    let label = `Wave ${w}`;
    let live = false;
    if (plan.proposed) label += " · proposed";
    else if (plan.open_wave === w) {
      label += " · running";
      live = true;
    } else if (inCol.every((n) => n.projected)) label += " · to come";
    svg.appendChild(
      h("svg:rect", { class: "col-band", x: x - 8, y: PAD - 4, width: W + 16, height: height - PAD * 2 + 8, rx: 10 }),
    );
    svg.appendChild(h("svg:text", { class: ["col-label", live && "live"], x, y: PAD + 12 }, label));
  });

  // Edges.
  const edges = h("svg:g", { class: "edges" });
  for (const e of plan.edges) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W;
    const y1 = a.y + H / 2;
    const x2 = b.x;
    const y2 = b.y + H / 2;
    let d;
    if (x2 > x1) {
      const dx = Math.max(24, (x2 - x1) / 2);
      d = `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
    } else {
      // Same column (a plan whose waves were not all drawn yet): around the right side.
      const bx = Math.max(x1, b.x + W) + 28;
      d = `M${x1},${y1} C${bx},${y1} ${bx},${b.y + H / 2} ${b.x + W},${b.y + H / 2}`;
    }
    const hot = selected && (e.from === selected || e.to === selected);
    const title = e.reads.length ? `${e.from} → ${e.to}: reads ${e.reads.join(", ")}` : `${e.to} runs after ${e.from} (_dependsOn)`;
    edges.appendChild(
      h(
        "svg:path",
        { class: ["edge", e.kind, hot && "hot"], d, "marker-end": "url(#weft-arrow)", dataset: { from: e.from, to: e.to } },
        h("svg:title", {}, title),
      ),
    );
  }
  svg.appendChild(edges);

  // Nodes.
  const nodes = h("svg:g", { class: "nodes" });
  for (const n of plan.nodes) {
    const p = pos.get(n.id);
    const cls = stateClass(n);
    const text = stateText(n, calls);
    const tool = n.tool || "step executor";
    const g = h(
      "svg:g",
      {
        class: ["node", cls, selected === n.id && "selected"],
        transform: `translate(${p.x},${p.y})`,
        tabindex: 0,
        role: "button",
        "aria-label": `Step ${n.id}, ${tool}, ${text}`,
        "aria-pressed": selected === n.id ? "true" : "false",
        dataset: { step: n.id, status: n.status, col: p.c, row: p.r },
      },
      h("svg:title", {}, `${n.id} · ${tool}\n${n.description || ""}\n${text}`),
      h("svg:rect", { class: "box", width: W, height: H, rx: 8 }),
      h("svg:rect", { class: "stripe", x: 0, y: 0, width: 4, height: H, rx: 2 }),
      h("svg:text", { class: "id", x: 14, y: 19 }, cut(n.id, 18)),
      h("svg:text", { class: ["icon", cls], x: W - 12, y: 19, "text-anchor": "end" }, ICON[n.status] || "○"),
      h("svg:text", { class: "tool", x: 14, y: 37 }, cut(tool, 23)),
      h("svg:text", { class: "line2", x: 14, y: 54 }, cut(text, 28)),
    );
    g.addEventListener("click", () => onSelect(n.id));
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        onSelect(n.id);
        return;
      }
      const moves = { ArrowRight: [1, 0], ArrowLeft: [-1, 0], ArrowDown: [0, 1], ArrowUp: [0, -1] };
      const m = moves[ev.key];
      if (!m) return;
      ev.preventDefault();
      const c = p.c + m[0];
      const target = [...pos.entries()]
        .filter(([, q]) => q.c === c)
        .sort((a, b) => Math.abs(a[1].r - (p.r + m[1])) - Math.abs(b[1].r - (p.r + m[1])))[0];
      const id = m[1] !== 0 ? [...pos.entries()].find(([, q]) => q.c === p.c && q.r === p.r + m[1])?.[0] : target?.[0];
      if (id) svg.querySelector(`.node[data-step="${CSS.escape(id)}"]`)?.focus();
    });
    nodes.appendChild(g);
  }
  svg.appendChild(nodes);
  return svg;
}

/** The legend of states and edges. */
export function legend(proposed) {
  const item = (cls, text) => h("span", {}, h("i", { class: cls }), text);
  return h(
    "div",
    { class: "legend", "aria-hidden": "true" },
    proposed
      ? item("l-proposed", "proposed")
      : [
          item("l-pending", "pending"),
          item("l-running", "running"),
          item("l-completed", "completed"),
          item("l-failed", "failed"),
          item("l-waiting", "waiting / handled"),
          item("l-skipped", "skipped"),
        ],
    item("l-data", "reads data"),
    item("l-order", "_dependsOn"),
  );
}
