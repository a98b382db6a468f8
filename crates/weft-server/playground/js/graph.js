// @ts-check
// The plan as a graph: one column per wave (the wave a step ran in, or the one it would run in),
// a node per step coloured by its state, an edge per dependency (solid: data read through a
// `†` reference; dashed: `_dependsOn`). Nodes are buttons: Tab reaches them, arrow keys move
// between them, Enter or Space shows a step's details. The view zooms, pans, follows the running
// wave, finds a step and folds finished waves (see `GraphView`).

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

/** The most the graph's panel is tall: 620 pixels, or less in a low window; a taller plan is
 * panned and zoomed. */
const viewHeight = () => Math.round(Math.min(620, Math.max(300, window.innerHeight * 0.55)));
const MINI_W = 200;
const MINI_H = 130;
const ZOOM_MIN = 0.05;
const ZOOM_MAX = 2;
/** Below this scale the nodes show their state's colour and id only. */
const FAR = 0.45;
/** Above this many edges, only the selected step's are drawn strong. */
const MANY_EDGES = 60;
const SETTLED = new Set(["COMPLETED", "FAILED", "SKIPPED"]);

/** "1.2k tok · $0.0012" for what model calls used; "" for nothing.
 * @param {{ tokens: number, cost: number | null } | undefined} s */
export function spentText(s) {
  if (!s || !s.tokens) return "";
  const t = s.tokens >= 10000 ? `${(s.tokens / 1000).toFixed(0)}k` : s.tokens >= 1000 ? `${(s.tokens / 1000).toFixed(1)}k` : String(s.tokens);
  return `${t} tok${s.cost ? ` · $${s.cost.toFixed(4)}` : ""}`;
}

/**
 * The plan as a graph that stays readable at a thousand steps: zoom and pan (wheel, drag,
 * + − 0 and arrow keys), fit, a minimap with the viewport, following the running wave while the
 * session runs, finding a step by id, finished waves folded into one box with their counts, and
 * edges under the nodes (the selected step's drawn strong). `update` redraws only the nodes
 * whose state changed while the plan's shape stays the same.
 */
export class GraphView {
  /** @param {{ onSelect: (id: string | null, toggle?: boolean) => void }} options */
  constructor({ onSelect }) {
    this.onSelect = onSelect;
    /** The view: content point p is drawn at p * k + (x, y). */
    this.t = { k: 1, x: 0, y: 0 };
    this.placed = false;
    this.follow = true;
    this.live = false;
    /** @type {Set<number>} waves folded into one box */
    this.collapsed = new Set();
    this.shape = "";
    /** Each step's node as it should be drawn, and its element while it is in view.
     * @type {Map<string, { n: Node, p: any, text: string, used: string, sel: boolean, sig: string, g: SVGGElement | null }>} */
    this.nodeEls = new Map();
    /** @type {Map<string, { c: number, r: number, x: number, y: number }>} */
    this.pos = new Map();
    /** @type {Edge[]} */
    this.edgeList = [];
    this.size = { w: 0, h: 0 };
    /** @type {PlanGraph | null} */
    this.plan = null;
    /** @type {Map<string, Card>} */
    this.calls = new Map();
    this.spend = null;
    this.selected = null;
    this.refocusing = false;
    this.dragged = 0;
    this.vw = 0;
    /** @type {Record<string, string> | null} the minimap's colours, read once */
    this.fills = null;

    this.world = h("svg:g", { class: "world" });
    this.svg = h(
      "svg:svg",
      { class: "graph", width: "100%", height: 100, role: "group" },
      h(
        "svg:defs",
        {},
        h(
          "svg:marker",
          { id: "weft-arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
          h("svg:path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" }),
        ),
      ),
      this.world,
    );
    this.mini = /** @type {HTMLCanvasElement} */ (h("canvas", { class: "minimap", id: "minimap", width: MINI_W, height: MINI_H, role: "img", "aria-label": "Minimap of the plan; the frame is what the panel shows" }));
    const help = "Wheel or + and − zoom, drag or the arrow keys pan, 0 fits the plan, F follows the running wave";
    this.stage = h("div", { class: "graph-wrap", id: "graph", tabindex: 0, title: help, "aria-label": `Plan graph. ${help}.` }, this.svg, this.mini);
    this.fitBtn = h("button", { type: "button", class: "button small", id: "graph-fit", title: "Fit the plan in the panel (0)", onclick: () => this.fit(true) }, "Fit");
    this.outBtn = h("button", { type: "button", class: "button small", id: "graph-zoom-out", title: "Zoom out (−)", "aria-label": "Zoom out", onclick: () => this.zoomBy(1 / 1.25) }, "−");
    this.inBtn = h("button", { type: "button", class: "button small", id: "graph-zoom-in", title: "Zoom in (+)", "aria-label": "Zoom in", onclick: () => this.zoomBy(1.25) }, "+");
    this.followBtn = h("button", { type: "button", class: "button small", id: "graph-follow", title: "Keep the running wave in view (F)", onclick: () => this.setFollow(!this.follow) }, "Follow");
    this.foldBtn = h("button", { type: "button", class: "button small", id: "graph-collapse", title: "Fold each finished wave into one box with its counts", onclick: () => this.foldFinished() }, "Collapse finished");
    this.findBox = /** @type {HTMLInputElement} */ (h("input", { type: "search", id: "graph-find", placeholder: "Find a step by id", "aria-label": "Find a step by id", autocomplete: "off", spellcheck: "false" }));
    this.found = h("span", { class: "muted graph-found", id: "graph-found", "aria-live": "polite" });
    const find = h("form", { class: "graph-find", role: "search" }, this.findBox, this.found);
    find.addEventListener("submit", (e) => {
      e.preventDefault();
      this.find(this.findBox.value);
    });
    this.toolbar = h("div", { class: "graph-tools", role: "toolbar", "aria-label": "Graph view" }, this.fitBtn, this.outBtn, this.inBtn, this.followBtn, this.foldBtn, find);
    this.el = h("div", { class: "graph-view" }, this.toolbar, this.stage);
    this.listen();
  }

  // --- Input ----------------------------------------------------------------------------------

  listen() {
    const st = this.stage;
    st.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const r = st.getBoundingClientRect();
        this.zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
      },
      { passive: false },
    );
    // A drag anywhere in the panel pans (a press that does not move is a click: on a node, it
    // selects the node).
    /** @type {{ id: number, x: number, y: number, moved: boolean } | null} */
    let drag = null;
    st.addEventListener("pointerdown", (e) => {
      const t = /** @type {Element} */ (e.target);
      if (e.button !== 0 || t.closest(".minimap")) return;
      drag = { id: e.pointerId, x: e.clientX, y: e.clientY, moved: false };
      // A pressed node is focused without scrolling the page (its click focuses it).
      if (t.closest(".node, .wave-box")) e.preventDefault();
    });
    // Followed on the window: a fast drag leaves the panel between two events.
    const move = (e) => {
      if (!drag || e.pointerId !== drag.id) return;
      if (!drag.moved) {
        if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) < 5) return;
        drag.moved = true;
        st.setPointerCapture(e.pointerId);
        st.classList.add("dragging");
      }
      this.panBy(e.clientX - drag.x, e.clientY - drag.y);
      drag.x = e.clientX;
      drag.y = e.clientY;
    };
    const end = (e) => {
      if (!drag || e.pointerId !== drag.id) return;
      // The click that ends a drag selects nothing.
      if (drag.moved) this.dragged = performance.now();
      drag = null;
      st.classList.remove("dragging");
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", end);
    window.addEventListener("pointercancel", end);
    this.unlisten = () => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", end);
      window.removeEventListener("pointercancel", end);
      this.resized?.disconnect();
    };
    st.addEventListener(
      "click",
      (e) => {
        if (this.dragged && performance.now() - this.dragged < 300) e.stopPropagation();
        this.dragged = 0;
      },
      true,
    );
    st.addEventListener("keydown", (e) => {
      if (e.target instanceof HTMLInputElement || e.ctrlKey || e.metaKey || e.altKey) return;
      const onNode = /** @type {Element} */ (e.target).closest?.(".node");
      const pan = { ArrowLeft: [80, 0], ArrowRight: [-80, 0], ArrowUp: [0, 80], ArrowDown: [0, -80] }[e.key];
      if (pan && !onNode) this.panBy(pan[0], pan[1]);
      else if (e.key === "+" || e.key === "=") this.zoomBy(1.25);
      else if (e.key === "-" || e.key === "_") this.zoomBy(1 / 1.25);
      else if (e.key === "0") this.fit(true);
      else if (e.key === "f" || e.key === "F") this.setFollow(true);
      else return;
      e.preventDefault();
    });
    // Focusing a node half out of the panel would scroll the panel itself: the view is the
    // transform's alone.
    st.addEventListener("scroll", () => {
      st.scrollTop = 0;
      st.scrollLeft = 0;
    });
    // A node reached with the keyboard is brought into view.
    st.addEventListener("focusin", (e) => {
      const g = /** @type {Element} */ (e.target).closest?.(".node, .wave-box");
      // A node pressed with the pointer is in view already (and may be dragged).
      if (!g || this.refocusing || drag) return;
      const box = this.boxOf(/** @type {SVGGElement} */ (g));
      if (box && !this.inView(box)) {
        this.follow = false;
        this.reveal(box);
      }
    });
    const toMini = (e) => {
      const m = this.miniScale();
      const r = this.mini.getBoundingClientRect();
      const cx = (e.clientX - r.left) / m;
      const cy = (e.clientY - r.top) / m;
      const { w, h: vh } = this.viewport();
      this.follow = false;
      this.set({ k: this.t.k, x: w / 2 - cx * this.t.k, y: vh / 2 - cy * this.t.k });
    };
    let miniDrag = false;
    this.mini.addEventListener("pointerdown", (e) => {
      miniDrag = true;
      this.mini.setPointerCapture(e.pointerId);
      toMini(e);
    });
    this.mini.addEventListener("pointermove", (e) => miniDrag && toMini(e));
    this.mini.addEventListener("pointerup", () => (miniDrag = false));
    if (typeof ResizeObserver !== "undefined") {
      this.resized = new ResizeObserver(() => {
        this.vw = st.clientWidth;
        this.apply();
      });
      this.resized.observe(st);
    }
  }

  /** Stops listening to the window (the page that showed the graph is left). */
  destroy() {
    this.unlisten?.();
    if (this.miniFrame) cancelAnimationFrame(this.miniFrame);
  }

  // --- The view -------------------------------------------------------------------------------

  /** The panel's size in pixels. */
  viewport() {
    // The width is read once and when the panel is resized: reading it lays the page out.
    if (!this.vw) this.vw = this.stage.clientWidth;
    return { w: this.vw || this.size.w, h: Number(this.svg.getAttribute("height")) || this.size.h };
  }

  /** @param {{ k: number, x: number, y: number }} t */
  set(t) {
    const { w, h: vh } = this.viewport();
    const k = Math.min(ZOOM_MAX, Math.max(Math.min(ZOOM_MIN, this.fitScale()), t.k));
    // A plan larger than the panel fills it (but for a margin); a smaller one stays in it.
    const cw = this.size.w * k;
    const ch = this.size.h * k;
    const x = Math.min(Math.max(0, w - cw) + 40, Math.max(Math.min(0, w - cw) - 40, t.x));
    const y = Math.min(Math.max(0, vh - ch) + 40, Math.max(Math.min(0, vh - ch) - 40, t.y));
    this.t = { k, x, y };
    this.apply();
  }

  apply() {
    const { k, x, y } = this.t;
    this.world.setAttribute("transform", `translate(${x.toFixed(1)},${y.toFixed(1)}) scale(${k.toFixed(4)})`);
    this.svg.classList.toggle("far", k < FAR);
    this.stage.dataset.zoom = k.toFixed(3);
    this.followBtn.setAttribute("aria-pressed", this.follow ? "true" : "false");
    this.cull();
    if (!this.miniFrame) this.miniFrame = requestAnimationFrame(() => this.drawMini());
  }

  fitScale() {
    const { w, h: vh } = this.viewport();
    return Math.min(1, w / Math.max(1, this.size.w), vh / Math.max(1, this.size.h));
  }

  /** Shows the whole plan. `byHand`: the person asked, which stops following. */
  fit(byHand = false) {
    if (byHand) this.follow = false;
    const k = this.fitScale();
    const { w, h: vh } = this.viewport();
    this.set({ k, x: Math.max(0, (w - this.size.w * k) / 2), y: Math.max(0, (vh - this.size.h * k) / 2) });
  }

  zoomBy(f) {
    const { w, h: vh } = this.viewport();
    this.zoomAt(f, w / 2, vh / 2);
  }

  /** Zooms by `f` around the panel's point (px, py). */
  zoomAt(f, px, py) {
    const { k, x, y } = this.t;
    const k2 = Math.min(ZOOM_MAX, Math.max(Math.min(ZOOM_MIN, this.fitScale()), k * f));
    this.follow = false;
    this.set({ k: k2, x: px - ((px - x) * k2) / k, y: py - ((py - y) * k2) / k });
  }

  panBy(dx, dy) {
    this.follow = false;
    this.set({ k: this.t.k, x: this.t.x + dx, y: this.t.y + dy });
  }

  setFollow(on) {
    this.follow = on;
    if (on) this.followRunning();
    this.apply();
  }

  /** @param {{ x: number, y: number, w: number, h: number }} b a box in the plan's coordinates */
  inView(b, margin = 4) {
    const { k, x, y } = this.t;
    const { w, h: vh } = this.viewport();
    return b.x * k + x >= margin && b.y * k + y >= margin && (b.x + b.w) * k + x <= w - margin && (b.y + b.h) * k + y <= vh - margin;
  }

  /** Pans (at a readable scale) so that box `b` is in view: centred if it fits, else its top. */
  reveal(b, minScale = 0) {
    const { w, h: vh } = this.viewport();
    const k = Math.max(this.t.k, minScale);
    const x = b.w * k <= w - 24 ? w / 2 - (b.x + b.w / 2) * k : 12 - b.x * k;
    const y = b.h * k <= vh - 24 ? vh / 2 - (b.y + b.h / 2) * k : 12 - b.y * k;
    this.set({ k, x, y });
  }

  /** @param {Element} g a node or a wave's box */
  boxOf(g) {
    const id = /** @type {SVGGElement} */ (g).dataset.step;
    const p = id !== undefined ? this.pos.get(id) : null;
    if (p) return { x: p.x, y: p.y, w: W, h: H };
    const wave = Number(/** @type {SVGGElement} */ (g).dataset.wave);
    const c = this.boxes?.get(wave);
    return c ? { x: c.x, y: c.y, w: W, h: H } : null;
  }

  /** Brings the running steps (or the open wave) into view, when they are not. */
  followRunning() {
    if (!this.plan || !this.live) return;
    const running = this.plan.nodes.filter((n) => n.status === "RUNNING" || n.status === "WAITING_FOR_USER");
    const open = running.length ? running : this.plan.nodes.filter((n) => n.wave === this.plan?.open_wave);
    const boxes = open.map((n) => this.pos.get(n.id)).filter((p) => p !== undefined);
    if (!boxes.length) return;
    const x0 = Math.min(...boxes.map((p) => p.x));
    const y0 = Math.min(...boxes.map((p) => p.y));
    const b = { x: x0, y: y0, w: Math.max(...boxes.map((p) => p.x + W)) - x0, h: Math.max(...boxes.map((p) => p.y + H)) - y0 };
    // The first running step at least: a column taller than the panel shows its top.
    const first = { x: boxes[0].x, y: boxes[0].y, w: W, h: H };
    if (this.inView(b) || (b.h * this.t.k > this.viewport().h && this.inView(first))) return;
    this.reveal(b);
  }

  /** Finds a step by its id (exactly, else the first whose id contains the text), shows and
   * selects it. @param {string} text */
  find(text) {
    const q = text.trim();
    if (!q || !this.plan) return;
    const lower = q.toLowerCase();
    const node = this.plan.nodes.find((n) => n.id === q) || this.plan.nodes.find((n) => n.id.toLowerCase().includes(lower));
    if (!node) {
      this.found.textContent = `No step matches “${q}”.`;
      return;
    }
    this.found.textContent = `${node.id} · wave ${node.wave}`;
    if (this.collapsed.delete(node.wave)) this.shape = "";
    this.follow = false;
    this.onSelect(node.id, false);
    if (this.plan && this.shape === "") this.update(this.plan, this.calls, { selected: node.id, spend: this.spend, live: this.live });
    const p = this.pos.get(node.id);
    if (p) this.reveal({ x: p.x, y: p.y, w: W, h: H }, 1);
    this.nodeEls.get(node.id)?.g?.focus({ preventScroll: true });
  }

  /** Moves the focus to step `id`, bringing it into view first. @param {string} id */
  focusStep(id) {
    const p = this.pos.get(id);
    if (!p) return;
    const box = { x: p.x, y: p.y, w: W, h: H };
    if (!this.inView(box)) {
      this.follow = false;
      this.reveal(box);
    }
    this.nodeEls.get(id)?.g?.focus({ preventScroll: true });
  }

  /** Draws what is in view or near it (half a panel around it), and takes away the rest: a plan
   * of a thousand steps keeps a few dozen nodes in the page. */
  cull() {
    if (!this.nodeGroup) return;
    const { k, x, y } = this.t;
    const { w, h: vh } = this.viewport();
    const mx = w / k / 2;
    const my = vh / k / 2;
    const x0 = -x / k - mx;
    const y0 = -y / k - my;
    const x1 = (w - x) / k + mx;
    const y1 = (vh - y) / k + my;
    const meets = (ax, ay, bx, by) => bx >= x0 && ax <= x1 && by >= y0 && ay <= y1;
    for (const want of this.nodeEls.values()) {
      const { p } = want;
      const inside = meets(p.x, p.y, p.x + W, p.y + H);
      if (inside && !want.g) {
        want.g = this.node(want.n, p, want.text, want.used, want.sel);
        this.nodeGroup.appendChild(want.g);
      } else if (!inside && want.g && document.activeElement !== want.g) {
        want.g.remove();
        want.g = null;
      }
    }
    for (const e of this.edgeList) {
      const inside = meets(Math.min(e.a.x, e.b.x), Math.min(e.a.y, e.b.y), Math.max(e.a.x, e.b.x) + W, Math.max(e.a.y, e.b.y) + H);
      if (inside && !e.el) {
        e.el = edgePath(e.a, e.b, [...e.cls, e.hot && "hot"], e.title, { from: e.from, to: e.to });
        (e.hot ? this.hotGroup : this.edgeGroup)?.appendChild(e.el);
      } else if (!inside && e.el) {
        e.el.remove();
        e.el = null;
      }
    }
    this.stage.dataset.drawn = String(this.nodeGroup.childElementCount);
  }

  /** Folds every finished wave, or unfolds them all when they are folded already. */
  foldFinished() {
    if (!this.plan) return;
    const finished = this.finishedWaves();
    const all = finished.length > 0 && finished.every((w) => this.collapsed.has(w));
    for (const w of finished) {
      if (all) this.collapsed.delete(w);
      else this.collapsed.add(w);
    }
    this.shape = "";
    this.update(this.plan, this.calls, { selected: this.selected, spend: this.spend, live: this.live });
  }

  finishedWaves() {
    const plan = this.plan;
    if (!plan || plan.proposed) return [];
    return plan.waves.filter((w) => w.finished && plan.nodes.every((n) => n.wave !== w.wave || SETTLED.has(String(n.status)))).map((w) => w.wave);
  }

  toggleWave(wave) {
    if (!this.collapsed.delete(wave)) this.collapsed.add(wave);
    this.shape = "";
    if (this.plan) this.update(this.plan, this.calls, { selected: this.selected, spend: this.spend, live: this.live });
  }

  // --- Drawing --------------------------------------------------------------------------------

  /**
   * Draws `plan` (the `plan` of `GET /sessions/{id}`), or brings the drawing up to date with it.
   * `selected`: the step shown in detail; `spend`: what model calls used per wave and step;
   * `live`: the session runs and is shown as it is now (the view follows the running wave).
   * @param {PlanGraph} plan
   * @param {Map<string, Card>} calls the session's calls by id
   * @param {{ selected: string | null, spend?: { waves: Map<number, any>, steps: Map<string, any> } | null, live?: boolean }} options
   */
  update(plan, calls, { selected, spend = null, live = false }) {
    const wasLive = this.live;
    this.plan = plan;
    this.calls = calls;
    this.spend = spend;
    this.live = live;
    if (live && !wasLive && !this.placed) this.follow = true;
    for (const w of [...this.collapsed]) if (!this.finishedWaves().includes(w)) this.collapsed.delete(w);
    const shape = JSON.stringify([plan.proposed, [...this.collapsed], plan.edges.length, plan.nodes.map((n) => `${n.id}@${n.wave}`).join(" ")]);
    if (shape !== this.shape) {
      this.shape = shape;
      this.draw(plan);
    }
    this.patch(plan, calls, selected);
    this.followBtn.hidden = !live;
    this.foldBtn.setAttribute("aria-pressed", this.collapsed.size ? "true" : "false");
    if (!this.placed && this.stage.isConnected) {
      this.placed = true;
      const { w, h: vh } = this.viewport();
      const p = selected ? this.pos.get(selected) : null;
      if (this.size.w <= w && this.size.h <= vh) this.set({ k: 1, x: 0, y: 0 });
      else if (live && this.follow) this.followRunning();
      else if (p) this.reveal({ x: p.x, y: p.y, w: W, h: H }, 1);
      else this.set({ k: 1, x: 0, y: 0 });
    } else if (live && this.follow) this.followRunning();
    this.apply();
  }

  /** Lays the plan out and draws it whole. @param {PlanGraph} plan */
  draw(plan) {
    const cols = [...new Set(plan.nodes.map((n) => n.wave))].sort((a, b) => a - b);
    this.cols = cols;
    const colOf = new Map(cols.map((w, i) => [w, i]));
    const rows = new Map();
    this.pos = new Map();
    /** @type {Map<number, { x: number, y: number, c: number }>} */
    this.boxes = new Map();
    for (const [i, w] of cols.entries()) {
      if (this.collapsed.has(w)) this.boxes.set(w, { x: PAD + i * (W + GX), y: PAD + HEAD, c: i });
    }
    for (const n of plan.nodes) {
      const c = colOf.get(n.wave) ?? 0;
      if (this.collapsed.has(n.wave)) continue;
      const r = rows.get(c) || 0;
      rows.set(c, r + 1);
      this.pos.set(n.id, { c, r, x: PAD + c * (W + GX), y: PAD + HEAD + r * (H + GY) });
    }
    const maxRows = Math.max(1, ...rows.values());
    const width = PAD * 2 + Math.max(1, cols.length) * (W + GX) - GX;
    const height = PAD * 2 + HEAD + maxRows * (H + GY) - GY;
    this.size = { w: width, h: height };
    this.svg.setAttribute("height", String(Math.min(viewHeight(), height)));
    this.svg.setAttribute("aria-label", `Plan: ${plan.nodes.length} steps in ${cols.length} waves`);

    const bands = h("svg:g", { class: "cols" });
    /** @type {Map<number, SVGElement>} */
    const labels = new Map();
    this.labels = labels;
    cols.forEach((w, i) => {
      const x = PAD + i * (W + GX);
      bands.appendChild(h("svg:rect", { class: "col-band", x: x - 8, y: PAD - 4, width: W + 16, height: height - PAD * 2 + 8, rx: 10 }));
      const label = /** @type {SVGElement} */ (h("svg:text", { class: "col-label", x, y: PAD + 12, dataset: { wave: String(w) } }));
      bands.appendChild(label);
      labels.set(w, label);
    });

    // Edges, under the nodes; an edge to or from a folded wave goes to its box, one per pair.
    this.edgeGroup = h("svg:g", { class: "edges" });
    this.hotGroup = h("svg:g", { class: "edges hot-edges" });
    this.svg.classList.toggle("many", plan.edges.length > MANY_EDGES);
    /** @type {Edge[]} */
    this.edgeList = [];
    const waveOf = new Map(plan.nodes.map((n) => [n.id, n.wave]));
    /** @type {Map<string, Edge>} */
    const bundled = new Map();
    for (const e of plan.edges) {
      const wa = /** @type {number} */ (waveOf.get(e.from));
      const wb = /** @type {number} */ (waveOf.get(e.to));
      const a = this.pos.get(e.from) || this.boxes.get(wa);
      const b = this.pos.get(e.to) || this.boxes.get(wb);
      if (!a || !b || a === b) continue;
      const title = e.reads.length ? `${e.from} → ${e.to}: reads ${e.reads.join(", ")}` : `${e.to} runs after ${e.from} (_dependsOn)`;
      if (this.pos.has(e.from) && this.pos.has(e.to)) {
        this.edgeList.push(edge(a, b, ["edge", e.kind], title, e.from, e.to, 1));
      } else {
        const key = `${this.pos.has(e.from) ? e.from : `wave ${wa}`}>${this.pos.has(e.to) ? e.to : `wave ${wb}`}`;
        const k = bundled.get(key) || edge(a, b, ["edge", "bundle", e.kind], title, e.from, e.to, 0);
        k.n += 1;
        if (k.n > 1) k.title = `${key.replace(">", " → ")}: ${k.n} dependencies`;
        bundled.set(key, k);
      }
    }
    this.edgeList.push(...bundled.values());

    this.nodeGroup = h("svg:g", { class: "nodes" });
    this.nodeEls = new Map();
    this.selected = null;
    const boxes = h("svg:g", { class: "wave-boxes" });
    this.boxEls = new Map();
    for (const [w, b] of this.boxes) {
      const g = h("svg:g", { class: "wave-box", transform: `translate(${b.x},${b.y})`, tabindex: 0, role: "button", dataset: { wave: String(w) } });
      g.addEventListener("click", () => this.toggleWave(w));
      g.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") {
          ev.preventDefault();
          this.toggleWave(w);
        }
      });
      boxes.appendChild(g);
      this.boxEls.set(w, g);
    }
    this.world.replaceChildren(bands, this.edgeGroup, this.hotGroup, this.nodeGroup, boxes);
  }

  /** Brings nodes, wave labels and boxes, and the edges' highlight up to date.
   * @param {PlanGraph} plan @param {Map<string, Card>} calls @param {string | null} selected */
  patch(plan, calls, selected) {
    const steps = this.spend?.steps;
    for (const n of plan.nodes) {
      const p = this.pos.get(n.id);
      if (!p) continue;
      const text = stateText(n, calls);
      const used = spentText(steps?.get(n.id));
      const sig = `${n.status}|${n.handled}|${text}|${used}|${selected === n.id}|${n.tool}|${n.description}`;
      const had = this.nodeEls.get(n.id);
      if (had && had.sig === sig) continue;
      const want = { n, p, text, used, sel: selected === n.id, sig, g: had?.g || null };
      this.nodeEls.set(n.id, want);
      // A node out of view is drawn when it comes into view (`cull`).
      if (!had?.g) continue;
      const g = this.node(n, p, text, used, selected === n.id);
      const focused = document.activeElement === had.g;
      had.g.replaceWith(g);
      want.g = g;
      if (focused) {
        // The same step keeps the focus: that is no move of the person's.
        this.refocusing = true;
        g.focus({ preventScroll: true });
        this.refocusing = false;
      }
    }
    if (selected !== this.selected || this.edgesFor !== this.shape) {
      this.selected = selected;
      this.edgesFor = this.shape;
      // The selected step's edges are drawn strong, over the others.
      for (const e of this.edgeList) {
        e.hot = e.n === 1 && Boolean(selected) && (e.from === selected || e.to === selected);
        if (e.el) {
          e.el.classList.toggle("hot", e.hot);
          (e.hot ? this.hotGroup : this.edgeGroup)?.appendChild(e.el);
        }
      }
    }
    const marks = new Map(plan.waves.map((w) => [w.wave, w]));
    for (const [w, label] of this.labels || []) {
      const inCol = plan.nodes.filter((n) => n.wave === w);
      let text = `Wave ${w}`;
      let live = false;
      if (plan.proposed) text += " · proposed";
      else if (plan.open_wave === w) {
        text += " · running";
        live = true;
      } else if (inCol.every((n) => n.projected)) text += " · to come";
      const used = spentText(this.spend?.waves.get(w));
      if (used) text += ` · ${used}`;
      if (label.textContent !== text) label.textContent = text;
      label.classList.toggle("live", live);
      const finished = marks.get(w)?.finished && inCol.every((n) => SETTLED.has(String(n.status)));
      label.classList.toggle("foldable", Boolean(finished));
      if (finished && !label.dataset.bound) {
        label.dataset.bound = "1";
        label.setAttribute("role", "button");
        label.setAttribute("tabindex", "0");
        label.addEventListener("click", () => this.toggleWave(w));
        label.addEventListener("keydown", (/** @type {KeyboardEvent} */ ev) => {
          if (ev.key === "Enter" || ev.key === " ") {
            ev.preventDefault();
            this.toggleWave(w);
          }
        });
      }
      if (finished) label.setAttribute("aria-label", `${text}: ${this.collapsed.has(w) ? "unfold" : "fold"} it`);
    }
    for (const [w, g] of this.boxEls || []) {
      const inCol = plan.nodes.filter((n) => n.wave === w);
      const by = (s) => inCol.filter((n) => n.status === s).length;
      const counts = `✓ ${by("COMPLETED")} ok · ✕ ${by("FAILED")} failed · ⤼ ${by("SKIPPED")} skipped`;
      const used = spentText(this.spend?.waves.get(w)) || "no model calls";
      const failed = by("FAILED") > 0;
      g.setAttribute("class", ["wave-box", failed ? "s-failed" : "s-completed"].join(" "));
      g.setAttribute("aria-label", `Wave ${w}, folded: ${inCol.length} steps, ${counts}, ${used}. Unfold it.`);
      g.dataset.ok = String(by("COMPLETED"));
      g.dataset.failed = String(by("FAILED"));
      g.dataset.skipped = String(by("SKIPPED"));
      g.replaceChildren(
        h("svg:title", {}, `Wave ${w}: ${inCol.length} steps\n${counts}\n${used}\nClick to unfold.`),
        h("svg:rect", { class: "box", width: W, height: H, rx: 8 }),
        h("svg:rect", { class: "stripe", x: 0, y: 0, width: 4, height: H, rx: 2 }),
        h("svg:text", { class: "id", x: 14, y: 19 }, `${inCol.length} steps`),
        h("svg:text", { class: "tool counts", x: 14, y: 37 }, `✓ ${by("COMPLETED")}  ✕ ${by("FAILED")}  ⤼ ${by("SKIPPED")}`),
        h("svg:text", { class: "line2 usage", x: 14, y: 54 }, used),
      );
    }
  }

  /** One step's node. */
  node(n, p, text, used, selected) {
    const cls = stateClass(n);
    const tool = n.tool || "step executor";
    const g = h(
      "svg:g",
      {
        class: ["node", cls, selected && "selected"],
        transform: `translate(${p.x},${p.y})`,
        tabindex: 0,
        role: "button",
        "aria-label": `Step ${n.id}, ${tool}, ${text}${used ? `, ${used}` : ""}`,
        "aria-pressed": selected ? "true" : "false",
        dataset: { step: n.id, status: n.status, col: p.c, row: p.r },
      },
      h("svg:title", {}, `${n.id} · ${tool}\n${n.description || ""}\n${text}${used ? `\n${used}` : ""}`),
      h("svg:rect", { class: "box", width: W, height: H, rx: 8 }),
      h("svg:rect", { class: "stripe", x: 0, y: 0, width: 4, height: H, rx: 2 }),
      h("svg:text", { class: "id", x: 14, y: 19 }, cut(n.id, 18)),
      h("svg:text", { class: ["icon", cls], x: W - 12, y: 19, "text-anchor": "end" }, ICON[n.status] || "○"),
      h("svg:text", { class: "tool", x: 14, y: 37 }, cut(tool, 23)),
      h("svg:text", { class: "line2", x: 14, y: 54 }, cut(text, used ? 14 : 28)),
      used && h("svg:text", { class: "usage", x: W - 10, y: 54, "text-anchor": "end" }, used),
    );
    g.addEventListener("click", () => {
      g.focus({ preventScroll: true });
      this.onSelect(n.id);
    });
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        this.onSelect(n.id);
        return;
      }
      const moves = { ArrowRight: [1, 0], ArrowLeft: [-1, 0], ArrowDown: [0, 1], ArrowUp: [0, -1] };
      const m = moves[ev.key];
      if (!m) return;
      ev.preventDefault();
      const here = this.pos.get(n.id);
      if (!here) return;
      const c = here.c + m[0];
      const entries = [...this.pos.entries()];
      const target = entries.filter(([, q]) => q.c === c).sort((a, b) => Math.abs(a[1].r - (here.r + m[1])) - Math.abs(b[1].r - (here.r + m[1])))[0];
      const id = m[1] !== 0 ? entries.find(([, q]) => q.c === here.c && q.r === here.r + m[1])?.[0] : target?.[0];
      if (id) this.focusStep(id);
    });
    return g;
  }

  miniScale() {
    return Math.min(MINI_W / Math.max(1, this.size.w), MINI_H / Math.max(1, this.size.h));
  }

  /** The minimap: every node as a dot of its state's colour, folded waves as boxes, and a frame
   * around what the panel shows (hidden while the whole plan is in view). */
  drawMini() {
    this.miniFrame = 0;
    const ctx = this.mini.getContext("2d");
    if (!ctx || !this.plan) return;
    const { k, x, y } = this.t;
    const { w, h: vh } = this.viewport();
    const view = { x: -x / k, y: -y / k, w: w / k, h: vh / k };
    const all = view.x <= 0 && view.y <= 0 && view.x + view.w >= this.size.w && view.y + view.h >= this.size.h;
    this.mini.hidden = all;
    this.mini.dataset.view = [view.x, view.y, view.w, view.h].map((v) => Math.round(v)).join(",");
    if (all) return;
    const m = this.miniScale();
    const css = getComputedStyle(this.stage);
    const color = (v, d) => css.getPropertyValue(v).trim() || d;
    const fills = (this.fills ??= {
      COMPLETED: color("--ok", "#15803d"),
      FAILED: color("--bad", "#c42b2b"),
      RUNNING: color("--run", "#0b72d9"),
      WAITING_FOR_USER: color("--warn", "#a15c00"),
      SKIPPED: color("--skip", "#8a93a1"),
      pending: color("--line-strong", "#c3c9d2"),
      panel: color("--panel", "#fff"),
      frame: color("--focus", "#1d8cff"),
    });
    ctx.clearRect(0, 0, MINI_W, MINI_H);
    ctx.fillStyle = fills.panel;
    ctx.fillRect(0, 0, this.size.w * m, this.size.h * m);
    for (const n of this.plan.nodes) {
      const p = this.pos.get(n.id);
      if (!p) continue;
      ctx.fillStyle = fills[n.status] || fills.pending;
      ctx.fillRect(p.x * m, p.y * m, Math.max(1, W * m), Math.max(1, H * m));
    }
    for (const [wave, b] of this.boxes || []) {
      const failed = this.plan.nodes.some((n) => n.wave === wave && n.status === "FAILED");
      ctx.fillStyle = failed ? fills.FAILED : fills.COMPLETED;
      ctx.fillRect(b.x * m, b.y * m, Math.max(1, W * m), Math.max(1, H * m));
    }
    ctx.strokeStyle = fills.frame;
    ctx.lineWidth = 2;
    ctx.strokeRect(view.x * m, view.y * m, view.w * m, view.h * m);
  }
}

/** @typedef {{ a: { x: number, y: number }, b: { x: number, y: number }, cls: string[], title: string, from: string, to: string, n: number, hot: boolean, el: Element | null }} Edge */

/** An edge to draw (or `n` dependencies bundled into one). @returns {Edge} */
function edge(a, b, cls, title, from, to, n) {
  return { a, b, cls, title, from, to, n, hot: false, el: null };
}

/** An edge from box `a` to box `b` (each at its top-left, W × H). */
function edgePath(a, b, cls, title, ends) {
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
  return h("svg:path", { class: cls, d, "marker-end": "url(#weft-arrow)", dataset: ends }, h("svg:title", {}, title));
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
