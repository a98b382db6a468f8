// @ts-check
// One session: the plan drawn live (or a ReAct agent's conversation), the step chosen in detail
// with its tool calls, the answer as it streams, usage and cost, the decisions of the run, and
// its events with a slider that shows the session as it was at any of them, to fork from there.
// Live updates come from the session's event stream: a running plan's events are applied to the
// view in the page (live.js); the view is fetched whole (`GET /sessions/{id}`, which folds the log
// on the server) at the open, on a gap, for an event the page does not fold and at the end, and
// at any event with `?at=N`.

import { api, follow, ApiError } from "./api.js";
import { h, fill, renderIfChanged, keyedList, age, when, usageText, pretty, cut, count, announce, spentOf } from "./dom.js";
import { GraphView, legend, stateClass, stateText } from "./graph.js";
import { callCard, decisions, conversation, errorDetail } from "./cards.js";
import { waitingPanel } from "./act.js";
import { jsonTree } from "./json.js";
import { timeline, spending } from "./timeline.js";
import { applyEvent } from "./live.js";
import { modelCalls } from "./inspector.js";
import { compareControl } from "./compare.js";
import { hint, runHint, sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["SessionView"]} SessionView */
/** @typedef {import("./api-types").components["schemas"]["StoredEvent"]} StoredEvent */
/** @typedef {import("./api-types").components["schemas"]["Card"]} Card */
/** @typedef {import("./api-types").components["schemas"]["Forked"]} Forked */
/** @typedef {import("./api-types").components["schemas"]["ForkedFrom"]} ForkedFrom */

/** The tool calls the Calls tab shows before "Show the earlier calls". */
const CALLS_SHOWN = 50;

const STATUS_LABEL = { running: "running", waiting_for_user: "waiting for you", completed: "completed", failed: "failed" };

export class SessionPage {
  /**
   * @param {HTMLElement} main
   * @param {string} id
   * @param {{ go: (hash: string) => void, setConn: (text: string) => void }} nav
   */
  constructor(main, id, { go, setConn }) {
    this.main = main;
    this.id = id;
    this.go = go;
    this.setConn = setConn;
    /** @type {SessionView | null} the session as shown (at `at`, or the latest) */
    this.view = null;
    /** @type {SessionView | null} */
    this.latest = null;
    /** @type {StoredEvent[]} */
    this.events = [];
    /** @type {number | null} */
    this.at = null;
    /** @type {Map<string, Card>} */
    this.calls = new Map();
    /** @type {any} the page's parts, made by build() */
    this.parts;
    this.text = "";
    this.selected = null;
    this.picked = false;
    this.tab = "calls";
    /** @type {number | null} the model call open in the inspector */
    this.inspecting = null;
    this.pending = null;
    this.timers = new Set();
    this.closed = false;
    /** @type {GraphView | null} */
    this.graph = null;
    /** The latest view misses events the page could not apply: it is fetched again. */
    this.stale = false;
    /** @type {string[]} steps that settled since the last render, to announce */
    this.settled = [];
    this.allCalls = false;
  }

  async mount() {
    this.build();
    try {
      this.latest = await api(`/sessions/${encodeURIComponent(this.id)}`);
    } catch (e) {
      fill(
        this.main,
        h(
          "div",
          { class: "alert bad", role: "alert" },
          h("h2", {}, e instanceof ApiError && e.status === 404 ? "No such session" : "The session could not be loaded"),
          h("p", {}, e instanceof ApiError && e.status === 404 ? `Session ${this.id} does not exist, or belongs to another user.` : sayApiError(e)),
          h("a", { href: "#/" }, "Back to the sessions"),
        ),
      );
      return;
    }
    this.view = this.latest;
    this.render();
    this.heading?.focus({ preventScroll: true });
    this.listen(0);
  }

  /** Follows the session's events after event `after`. A dropped stream reconnects after the
   * last event it had; the view is fetched whole once it is back (`ready`), as it is after a
   * gap, since what came while it was away is not known. */
  listen(after) {
    this.stream?.close();
    this.stream = follow(
      `/sessions/${encodeURIComponent(this.id)}/events`,
      {
        event: (env) => this.onEvent(env),
        text: (t) => this.onText(t.text),
        ready: () => {
          if (this.stale) this.refresh();
        },
        onstate: (s) => {
          if (s !== "live") this.stale = true;
          this.setConn(s === "live" ? "live" : "reconnecting…");
        },
        onfatal: (e) => this.flash(sayApiError(e, "The live stream stopped")),
      },
      { after },
    );
  }

  destroy() {
    this.closed = true;
    this.stream?.close();
    this.pending?.abort();
    this.graph?.destroy();
    for (const t of this.timers) clearTimeout(t);
  }

  later(ms, fn) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.closed) fn();
    }, ms);
    this.timers.add(t);
    return t;
  }

  build() {
    this.parts = {
      error: h("div", { class: "banner-error", role: "alert" }),
      head: h("header", { class: "s-head" }),
      alerts: h("div", { id: "alerts" }),
      travel: h("section", { class: "panel travel", "aria-label": "Time travel through the session's events" }),
      left: h("section", { class: "panel", id: "flow" }),
      right: h("aside", { class: "panel", id: "details", "aria-label": "Details" }),
      answer: h("section", { class: "panel", id: "answer-panel", "aria-labelledby": "answer-title" }),
      followup: h("div", {}),
      tabs: h("section", { class: "panel", id: "activity" }),
    };
    const p = this.parts;
    this.buildTravel();
    fill(
      this.main,
      p.error,
      p.head,
      p.alerts,
      h("div", { class: "stack" }, p.travel, h("div", { class: "s-grid" }, h("div", { class: "stack" }, p.left, p.answer, p.followup), p.right), p.tabs),
    );
  }

  flash(text) {
    fill(this.parts.error, text ? h("div", { class: "alert bad" }, text, " ", h("button", { type: "button", class: "button small", onclick: () => this.flash("") }, "Dismiss")) : null);
  }

  // --- Live updates -------------------------------------------------------------------------

  /** @param {StoredEvent} env */
  onEvent(env) {
    const last = this.events.length ? this.events[this.events.length - 1].seq : null;
    if (last !== null && env.seq <= last) return;
    if (last !== null && env.seq > last + 1) {
      // A gap: the events it missed are asked for again (the page's events are all of the
      // session's, for the tabs and the slider), and the view is fetched whole.
      this.stale = true;
      this.listen(last);
      this.scheduleRefresh();
      return;
    }
    this.events.push(env);
    if (["model_replied", "answer_drafted", "run_finished", "turn_started"].includes(env.type)) this.text = "";
    if (this.latest && env.seq > this.latest.last_seq && !this.stale) {
      if (applyEvent(this.latest, env)) this.noteSettled(env);
      else this.stale = true;
    }
    this.scheduleRefresh();
  }

  /** @param {StoredEvent} env */
  noteSettled(env) {
    /** @type {any} */
    const e = env;
    if (["step_completed", "step_failed", "step_skipped"].includes(e.type)) this.settled.push(`Step ${e.step} ${e.type.slice(5)}`);
  }

  onText(piece) {
    this.text += piece;
    if (this.at === null) this.renderAnswer();
  }

  /** A burst of events is drawn once: from the view they were applied to, or from the view
   * fetched again when one could not be. */
  scheduleRefresh() {
    if (this.refreshTimer) return;
    this.refreshTimer = this.later(120, () => {
      this.refreshTimer = null;
      if (this.stale) this.refresh();
      else this.renderLive();
    });
  }

  renderLive() {
    if (this.settled.length) announce(this.settled.join(". "));
    this.settled = [];
    if (this.at !== null) {
      // Shown as it was at an event: only what says how it stands now follows.
      this.renderHead();
      this.renderAlerts();
      this.updateTravel();
      return;
    }
    this.view = this.latest;
    // The tabs (a card per tool call) are redrawn at most once a second while events pour in.
    this.render(true);
  }

  async refresh() {
    if (this.inflight) {
      this.again = true;
      return;
    }
    this.inflight = true;
    try {
      /** @type {SessionView} */
      const v = await api(`/sessions/${encodeURIComponent(this.id)}`);
      if (this.closed) return;
      this.stale = false;
      // Events that came while the view was fetched are applied to it.
      for (const e of this.events) {
        if (e.seq <= v.last_seq || this.stale) continue;
        if (!applyEvent(v, e)) this.stale = true;
      }
      if (this.stale) this.scheduleRefresh();
      // A run that ended is no longer busy a moment later: asked once more then.
      if (v.busy && v.status !== "running" && v.status !== "waiting_for_user" && !this.askedAgain) {
        this.askedAgain = true;
        this.later(500, () => this.refresh());
      }
      this.announceChanges(this.latest, v);
      // The list shows the new status at once rather than at its next poll.
      if (this.latest && (this.latest.status !== v.status || this.latest.busy !== v.busy)) {
        window.dispatchEvent(new CustomEvent("weft:session-changed"));
      }
      this.latest = v;
      if (this.at === null) {
        this.view = v;
        this.render();
      } else {
        this.renderHead();
        this.renderAlerts();
      }
      this.setConn("live");
    } catch (e) {
      if (!(e instanceof Error && e.name === "AbortError")) this.setConn(e instanceof ApiError && e.status === 0 ? "cannot reach the server" : sayApiError(e));
    } finally {
      this.inflight = false;
      if (this.again) {
        this.again = false;
        this.scheduleRefresh();
      }
    }
  }

  /** @param {SessionView | null} before @param {SessionView} after */
  announceChanges(before, after) {
    if (!before?.plan || !after?.plan) return;
    const old = new Map(before.plan.nodes.map((n) => [n.id, n.status]));
    const changed = after.plan.nodes.filter((n) => old.get(n.id) !== n.status && ["COMPLETED", "FAILED", "SKIPPED", "WAITING_FOR_USER"].includes(n.status));
    if (changed.length) announce(changed.map((n) => `Step ${n.id} ${n.status.toLowerCase().replace(/_/g, " ")}`).join(". "));
    if (before.status !== after.status) announce(`The session is ${STATUS_LABEL[after.status] || after.status}.`);
  }

  // --- Time travel ----------------------------------------------------------------------------

  buildTravel() {
    this.slider = h("input", { type: "range", id: "travel", min: 1, max: 1, value: 1, step: 1, "aria-label": "Event" });
    this.slider.addEventListener("input", () => {
      // The position is taken at once (a live update redraws the slider where the person put
      // it); the session at that event is asked for once the slider rests.
      const n = Number(this.slider.value);
      this.at = n >= this.lastSeq() ? null : n;
      this.updateTravel();
      clearTimeout(this.slideTimer);
      this.slideTimer = this.later(90, () => this.setAt(this.at));
    });
    this.prevBtn = h("button", { type: "button", class: "button small", title: "Previous event ([)", "aria-label": "Previous event", onclick: () => this.step(-1) }, "◀");
    this.nextBtn = h("button", { type: "button", class: "button small", title: "Next event (])", "aria-label": "Next event", onclick: () => this.step(1) }, "▶");
    this.liveBtn = h("button", { type: "button", class: "button small", id: "travel-live", onclick: () => this.setAt(null) }, "Back to live");
    this.forkBtn = h("button", { type: "button", class: "button small", id: "fork", onclick: () => this.fork() }, "Fork from here");
    this.where = h("div", { class: "where", id: "travel-where", "aria-live": "polite" });
    this.eventJson = h("pre", {});
    fill(
      this.parts.travel,
      h("div", { class: "row" }, this.prevBtn, this.nextBtn),
      this.slider,
      h("div", { class: "row" }, this.liveBtn, this.forkBtn),
      this.where,
    );
  }

  lastSeq() {
    const fromEvents = this.events.length ? this.events[this.events.length - 1].seq : 0;
    return Math.max(fromEvents, this.latest?.last_seq || 0);
  }

  step(d) {
    const cur = this.at ?? this.lastSeq();
    const next = Math.min(Math.max(1, cur + d), this.lastSeq());
    this.setAt(next);
  }

  async setAt(n) {
    const last = this.lastSeq();
    if (n === null || n >= last) {
      this.at = null;
      this.pending?.abort();
      this.view = this.latest;
      this.render();
      return;
    }
    this.at = Math.max(1, n);
    this.updateTravel();
    this.pending?.abort();
    const ctl = new AbortController();
    this.pending = ctl;
    try {
      /** @type {SessionView} */
      const v = await api(`/sessions/${encodeURIComponent(this.id)}?at=${this.at}`, { signal: ctl.signal });
      if (ctl.signal.aborted || this.closed) return;
      this.view = v;
      this.render();
    } catch (e) {
      if (!(e instanceof Error && e.name === "AbortError")) this.flash(sayApiError(e, `The session at event ${n} could not be shown`));
    }
  }

  updateTravel() {
    const last = this.lastSeq();
    // The header, the slider and the Events tab count the same events, whichever tab is open.
    if (this.eventCount) this.eventCount.textContent = count(last);
    // The tabs' counts follow the events whichever tab is open (the tabs are redrawn only when
    // what the open one shows changed).
    const eventsTab = document.getElementById("tab-events");
    if (eventsTab) eventsTab.textContent = `Events (${this.events.length})`;
    const modelTab = document.getElementById("tab-model");
    if (modelTab) modelTab.textContent = `Model calls (${this.modelCallCount()})`;
    const at = this.at ?? last;
    this.slider.max = String(Math.max(1, last));
    this.slider.value = String(at);
    const env = this.events.find((e) => e.seq === at) || (this.view && this.view.seq === at ? this.view.event : null);
    const label = env ? `${env.type}${describe(env)}` : "";
    this.slider.setAttribute("aria-valuetext", `event ${at} of ${last}${label ? `: ${label}` : ""}`);
    this.parts.travel.classList.toggle("past", this.at !== null);
    this.liveBtn.hidden = this.at === null;
    this.prevBtn.disabled = at <= 1;
    this.nextBtn.disabled = at >= last;
    this.forkBtn.textContent = this.at === null ? "Fork at the last event" : `Fork from event ${at}`;
    fill(
      this.where,
      this.at === null ? h("span", {}, h("b", {}, "Live"), ` · ${last} events`) : h("span", {}, h("b", {}, `Event ${at} of ${last}`), " · the session as it was then"),
      env && h("span", { class: "mono" }, cut(label, 120)),
      env && h("time", { class: "faint", title: when(env.ts ? new Date(env.ts).toISOString() : "") }, env.ts ? new Date(env.ts).toLocaleTimeString() : ""),
    );
  }

  async fork() {
    const at = this.at ?? this.lastSeq();
    this.forkBtn.disabled = true;
    try {
      /** @type {Forked} */
      const r = await api(`/sessions/${encodeURIComponent(this.id)}/fork`, { method: "POST", body: { at } });
      announce(`Forked at event ${at} into a new session.`);
      this.go(`#/s/${encodeURIComponent(r.id)}`);
    } catch (e) {
      this.flash(sayApiError(e, "The fork failed"));
      this.forkBtn.disabled = false;
    }
  }

  // --- Rendering -----------------------------------------------------------------------------

  /** @param {boolean} [live] a burst of live events: the tabs may wait a little */
  render(live = false) {
    if (!this.view) return;
    const v = this.view;
    this.calls = new Map(v.calls.map((c) => [c.call_id, c]));
    // A failed step is shown at once, unless the person chose another.
    const failed = v.plan?.nodes.find((n) => n.status === "FAILED" && !n.handled);
    if (!this.picked && failed) this.selected = failed.id;
    if (this.selected && v.plan && !v.plan.nodes.some((n) => n.id === this.selected)) this.selected = null;
    this.renderHead();
    this.renderAlerts();
    this.updateTravel();
    this.renderFlow();
    this.renderDetails();
    this.renderAnswer();
    this.renderFollowup();
    if (!live) {
      this.tabsAt = performance.now();
      this.renderTabs();
    } else if (!this.tabsTimer) {
      const wait = Math.max(0, (this.tabsAt || 0) + 1000 - performance.now());
      this.tabsTimer = this.later(wait, () => {
        this.tabsTimer = null;
        this.tabsAt = performance.now();
        this.renderTabs();
      });
    }
  }

  renderHead() {
    const v = this.latest;
    const shown = this.view;
    if (!v || !shown) return;
    // `forked_from` is untyped in the API's schema; it is a `ForkedFrom` or null.
    const forked = /** @type {ForkedFrom | null} */ (v.forked_from);
    const paused = v.waiting?.kind === "paused";
    const label = paused ? "paused" : STATUS_LABEL[v.status] || v.status;
    const task = shown.task || shown.earlier_turns?.[0]?.task || "(no task yet)";
    const live = this.at === null;
    const actions = [];
    if (live && v.status === "running" && v.busy) {
      actions.push(h("button", { type: "button", class: "button", id: "pause", onclick: (e) => this.post("pause", e.currentTarget) }, "Pause"));
    }
    if (live && (v.status === "running" || v.status === "waiting_for_user")) {
      const cancel = h("button", { type: "button", class: "button danger", id: "cancel" }, "Cancel…");
      cancel.addEventListener("click", () => {
        if (cancel.dataset.armed) {
          this.post("cancel", cancel);
          return;
        }
        cancel.dataset.armed = "1";
        cancel.textContent = "Cancel the run for good?";
        this.later(4000, () => {
          delete cancel.dataset.armed;
          cancel.textContent = "Cancel…";
        });
      });
      actions.push(cancel);
    }
    if (live) actions.push(compareControl(v, this.go));
    const data = { id: v.id, task, label, st: v.status, busy: v.busy, agent: v.agent, mode: v.mode, user: v.user, usage: v.usage, mc: v.model_calls, tc: v.tool_calls, sp: v.spending, live, parent: v.parent_id, from: v.forked_from, created: v.created_at, n: actions.length };
    if (this.parts.head.dataset.sig === JSON.stringify(data)) return;
    this.parts.head.dataset.sig = JSON.stringify(data);
    fill(
      this.parts.head,
      h(
        "div",
        { class: "s-title" },
        (this.heading = h("h1", { tabindex: -1, id: "session-title" }, task)),
        h("span", { class: ["badge", paused ? "waiting_for_user" : v.status], id: "session-status", dataset: { status: v.status } }, v.busy && v.status === "running" && h("span", { class: "spin", "aria-hidden": "true" }), label),
        h("div", { class: "actions" }, actions),
      ),
      h(
        "div",
        { class: "s-meta" },
        h("span", {}, "agent ", h("b", {}, v.agent), v.mode ? ` (${v.mode})` : ""),
        v.user && h("span", {}, "user ", h("b", {}, v.user)),
        h("span", {}, "session ", h("span", { class: "mono" }, v.id)),
        h("span", { title: when(v.created_at) }, `started ${age(v.created_at)}`),
        forked && h("span", {}, "forked from ", h("a", { href: `#/s/${encodeURIComponent(forked.session)}` }, cut(forked.session, 14)), ` at event ${forked.at}`),
      ),
      h(
        "div",
        { class: "stats", "aria-label": "Usage" },
        h("span", {}, "tokens ", h("b", {}, usageText(v.usage) || "0")),
        h("span", {}, "model calls ", h("b", {}, count(v.model_calls))),
        h("span", {}, "tool calls ", h("b", {}, count(v.tool_calls))),
        budgetText(v.spending) && h("span", { id: "session-budget" }, "budget ", h("b", {}, budgetText(v.spending))),
        h("span", {}, "events ", (this.eventCount = h("b", { id: "event-count" }, count(this.lastSeq())))),
      ),
    );
  }

  async post(what, button) {
    if (button) button.disabled = true;
    try {
      await api(`/sessions/${encodeURIComponent(this.id)}/${what}`, { method: "POST" });
      announce(what === "pause" ? "Paused." : "Cancelled.");
    } catch (e) {
      this.flash(sayApiError(e, what === "pause" ? "The pause failed" : "The cancel failed"));
    } finally {
      if (button) button.disabled = false;
      this.refresh();
    }
  }

  renderAlerts() {
    const v = this.latest;
    if (!v) return;
    const live = this.at === null;
    const w = v.waiting;
    if (!this.waitingBox) {
      this.waitingBox = h("div", {});
      this.failureBox = h("div", {});
      fill(this.parts.alerts, this.waitingBox, this.failureBox);
    }
    // The waiting panel is rebuilt only when the wait itself changes: what is typed stays.
    const waiting = live && w ? { kind: w.kind, q: w.question, plan: w.plan, call: w.call_id, step: w.step } : null;
    renderIfChanged(this.waitingBox, { waiting, past: !live && !!w }, (d) => {
      if (d.waiting) return waitingPanel(v, () => this.refresh());
      if (d.past) {
        return h("div", { class: "alert warn" }, "The session waits for you now. ", h("button", { type: "button", class: "button small", onclick: () => this.setAt(null) }, "Back to live to answer"));
      }
      return null;
    });
    const failedSteps = (this.view?.plan?.nodes || []).filter((n) => n.status === "FAILED");
    const failed = this.view?.status === "failed" ? this.view.error || "the run failed" : null;
    const sig = { failed, steps: failedSteps.map((n) => [n.id, n.tool, n.error?.kind, n.error?.message, n.handled]) };
    renderIfChanged(this.failureBox, sig, () => {
      if (failed) {
        return h(
          "section",
          { class: "alert bad", id: "failure", "aria-labelledby": "failure-title" },
          h("h2", { id: "failure-title" }, "The run failed"),
          h("p", {}, failed),
          failedSteps.length > 0 &&
            h(
              "ul",
              {},
              failedSteps.map((n) =>
                h(
                  "li",
                  {},
                  h("button", { type: "button", class: "button small", onclick: () => this.select(n.id, false) }, `Step ${n.id}`),
                  ` ${n.tool || "step executor"} failed: ${n.error?.kind}: ${cut(n.error?.message || "", 200)}${n.handled ? " (handled by its error path)" : ""}`,
                ),
              ),
            ),
          h("p", { class: "hint" }, h("b", {}, "What to do: "), failedSteps.length ? hint(failedSteps[0].error?.kind) : runHint(failed)),
        );
      }
      const open = failedSteps.find((n) => !n.handled);
      return open ? h("div", { class: "alert bad" }, `Step ${open.id} failed (${open.error?.kind}); the steps that need its result are skipped.`) : null;
    });
  }

  select(id, toggle = true) {
    // A step shown by the page itself (the failed one) stays open on the first click: the
    // person asked to see it, not to close it.
    this.selected = toggle && this.picked && this.selected === id ? null : id;
    this.picked = true;
    this.renderFlow();
    this.renderDetails();
    this.renderTabs();
    if (this.selected) document.getElementById("details")?.scrollIntoView({ block: "nearest" });
  }

  renderFlow() {
    const v = this.view;
    if (!v) return;
    const el = this.parts.left;
    const plan = v.plan;
    if (plan) {
      // The graph is made once and brought up to date: its zoom, pan and folds stay.
      const graph = (this.graph ??= new GraphView({ onSelect: (id, toggle) => this.select(id, toggle) }));
      renderIfChanged(el, { graph: true }, () => [(this.flowHead = h("div", { class: "panel-head" })), graph.el, (this.flowLegend = h("div", {}))]);
      renderIfChanged(this.flowHead, [plan.proposed, plan.version, plan.nodes.length, new Set(plan.nodes.map((n) => n.wave)).size], ([proposed, version, steps, waves]) => [
        h("h2", {}, proposed ? "Proposed plan" : `Plan${version > 1 ? ` v${version}` : ""}`),
        h("span", { class: "muted" }, `${steps} steps · ${waves} waves`),
      ]);
      renderIfChanged(this.flowLegend, plan.proposed, (proposed) => legend(proposed));
      // The event the drawing is at (the view's, or the last one applied to it).
      el.dataset.seq = String(v.seq);
      const upTo = this.at;
      graph.update(plan, this.calls, {
        selected: this.selected,
        spend: spending(upTo === null ? this.events : this.events.filter((e) => e.seq <= upTo)),
        live: upTo === null && v.status === "running",
      });
      return;
    }
    if (v.mode === "react" || v.conversation.length) {
      renderIfChanged(el, { c: v.conversation, calls: v.calls.map((c) => [c.call_id, c.status]) }, () => [
        h("div", { class: "panel-head" }, h("h2", {}, "Conversation")),
        h("div", { class: "panel-body" }, conversation(v, this.calls, (seq) => this.setAt(seq))),
      ]);
      return;
    }
    renderIfChanged(el, { phase: v.phase, status: v.status }, () => [
      h("div", { class: "panel-head" }, h("h2", {}, "Plan")),
      h("p", { class: "panel-body muted" }, v.status === "running" ? "The planner is at work…" : "No plan was made in this turn."),
    ]);
  }

  renderDetails() {
    const v = this.view;
    if (!v) return;
    const node = v.plan?.nodes.find((n) => n.id === this.selected);
    const el = this.parts.right;
    if (!node) {
      renderIfChanged(el, { input: v.input, data: v.data, task: v.task, turns: v.earlier_turns, memories: v.memories, plan: !!v.plan }, () => [
        h("div", { class: "panel-head" }, h("h2", {}, "Session")),
        h(
          "div",
          { class: "panel-body stack" },
          v.plan && h("p", { class: "muted" }, "Choose a step in the plan to see its calls."),
          v.earlier_turns.length > 0 &&
            h("div", {}, h("h3", {}, "Earlier turns"), h("ol", {}, v.earlier_turns.map((t) => h("li", {}, cut(t.task, 100), t.answer ? h("span", { class: "muted" }, ` → ${cut(t.answer, 100)}`) : "")))),
          v.memories?.length > 0 &&
            h("div", {}, h("h3", {}, "Remembered for this task"), h("ul", {}, v.memories.map((m) => h("li", {}, h("span", { class: "muted" }, `${m.scope} `), cut(m.text, 200))))),
          h("div", {}, h("h3", {}, "Input"), jsonTree(v.input ?? {}, "the input")),
          v.plan && h("div", { id: "state-json" }, h("h3", {}, "State"), jsonTree(v.data ?? {}, "the state")),
        ),
      ]);
      return;
    }
    const calls = (node.calls || []).flatMap((id) => this.calls.get(id) ?? []);
    renderIfChanged(el, { node, calls }, () => [
      h(
        "div",
        { class: "panel-head" },
        h("h2", {}, `Step ${node.id}`),
        h("span", { class: ["badge", stateClass(node).replace("s-", "")] }, stateText(node, this.calls)),
        h("span", { class: "spacer" }),
        h("button", { type: "button", class: "button small ghost", onclick: () => this.select(null, false), "aria-label": "Close the step's details" }, "✕"),
      ),
      h(
        "div",
        { class: "panel-body stack", id: "step-details", dataset: { step: node.id } },
        h(
          "dl",
          { class: "kv" },
          h("dt", {}, "tool"),
          h("dd", { class: "mono" }, node.tool || "(step executor)"),
          node.description && [h("dt", {}, "does"), h("dd", {}, node.description)],
          h("dt", {}, "wave"),
          h("dd", {}, `${node.wave}${node.projected ? " (to come)" : ""}`),
          h("dt", {}, "attempts"),
          h("dd", {}, String(node.attempts)),
          node.reason && [h("dt", {}, "skipped"), h("dd", {}, node.reason)],
        ),
        node.error &&
          h(
            "div",
            { class: "alert bad", id: "step-error" },
            h("h2", {}, `${node.handled ? "Failed (handled)" : "Failed"}: ${node.error.kind}`),
            h("p", {}, node.error.message),
            errorDetail(node.error.detail),
            h("p", { class: "hint" }, h("b", {}, "What to do: "), hint(node.error.kind)),
          ),
        h("div", {}, h("h3", {}, "Call as planned"), jsonTree(node.call, "the call")),
        node.output !== undefined && node.output !== null && h("div", {}, h("h3", {}, "Output"), jsonTree(node.output, "the output")),
        calls.length ? h("div", {}, h("h3", {}, `Tool calls (${calls.length})`), calls.map((c) => callCard(c, (seq) => this.setAt(seq)))) : h("p", { class: "muted" }, "No tool call yet."),
      ),
    ]);
  }

  renderAnswer() {
    const v = this.view;
    if (!v) return;
    const live = this.at === null;
    const streaming = live && this.text && !v.answer;
    const text = v.answer || (streaming ? this.text : "") || (v.drafts.length ? v.drafts[v.drafts.length - 1] : "");
    const el = this.parts.answer;
    el.hidden = !text;
    if (!text) return;
    const kind = v.answer ? "Answer" : streaming ? "Answer (streaming)" : "Draft answer";
    if (!this.answerText) {
      this.answerTitle = h("h2", { id: "answer-title" });
      this.answerText = h("div", { class: "answer", id: "answer" });
      fill(el, h("div", { class: "panel-head" }, this.answerTitle), h("div", { class: "panel-body" }, this.answerText));
    }
    this.answerTitle.textContent = kind;
    this.answerText.textContent = text;
    this.answerText.classList.toggle("streaming", Boolean(streaming));
  }

  renderFollowup() {
    const v = this.latest;
    if (!v) return;
    const show = this.at === null && (v.status === "completed" || v.status === "failed");
    renderIfChanged(this.parts.followup, { show, id: v.id }, () => {
      if (!show) return null;
      const text = h("textarea", { id: "followup-text", rows: 2, placeholder: "A new task for this session (it sees the earlier turns)", "aria-label": "A new task for this session" });
      const status = h("div", { class: "problems", role: "alert" });
      const go = h("button", { type: "button", class: "button primary", id: "followup-send" }, "Send");
      go.addEventListener("click", async () => {
        if (!text.value.trim()) {
          text.focus();
          return;
        }
        go.disabled = true;
        try {
          await api(`/threads/${encodeURIComponent(v.id)}/runs`, {
            method: "POST",
            body: { assistant_id: v.agent, input: { messages: [{ role: "user", content: text.value.trim() }] } },
          });
          text.value = "";
          this.refresh();
        } catch (e) {
          status.textContent = sayApiError(e, "The task was not sent");
        } finally {
          go.disabled = false;
        }
      });
      return h("section", { class: "panel" }, h("div", { class: "panel-body stack" }, text, h("div", { class: "row" }, go), status));
    });
  }

  /** How many model calls the session's events hold. */
  modelCallCount() {
    return this.events.filter((e) => e.type === "model_replied" || e.type === "model_failed").length;
  }

  renderTabs() {
    const v = this.view;
    if (!v) return;
    const tabs = [
      ["calls", `Tool calls (${v.calls.length})`],
      ["decisions", `Decisions (${v.reviews.length + v.plans.length})`],
      ["timeline", "Timeline"],
      ["model", `Model calls (${this.modelCallCount()})`],
      ["events", `Events (${this.events.length})`],
    ];
    const jump = (seq) => this.setAt(seq);
    /** Opens model call `n` in the inspector (the Model calls tab). */
    const inspect = (n) => {
      this.inspecting = n;
      this.tab = "model";
      this.renderTabs();
      queueMicrotask(() => document.getElementById("model-calls")?.scrollIntoView({ block: "start" }));
    };
    /** Opens the card of tool call `id` in the Tool calls tab, scrolled to and focused. */
    const showCall = (id) => {
      this.tab = "calls";
      // An early call of a long session is not among the latest shown.
      if (!v.calls.slice(-CALLS_SHOWN).some((c) => c.call_id === id)) this.allCalls = true;
      this.renderTabs();
      queueMicrotask(() => {
        const card = /** @type {HTMLElement | null} */ (document.querySelector(`.call-list [data-call="${CSS.escape(id)}"]`));
        if (!card) return;
        card.tabIndex = -1;
        card.scrollIntoView({ block: "nearest" });
        card.focus();
      });
    };
    const panel = () => {
      // The tool calls and the events are keyed lists, brought up to date below.
      if (this.tab === "calls") return v.calls.length ? [(this.callList = h("div", { class: "call-list" })), (this.moreCalls = h("div", {}))] : h("p", { class: "muted" }, "No tool call yet.");
      if (this.tab === "decisions") return decisions(v, jump);
      const upTo = this.at;
      if (this.tab === "timeline") return timeline(upTo === null ? this.events : this.events.filter((e) => e.seq <= upTo), { selected: this.selected, onSelect: (id) => this.select(id, false), onCall: showCall, onInspect: inspect });
      if (this.tab === "model") return modelCalls(this.id, { open: this.inspecting, onOpen: inspect });
      return (this.eventList = h("ol", { class: "events", "aria-label": "Events" }));
    };
    // What the panel is made from; the keyed lists' items are not in it (a live run adds to them
    // many times a second, and redrawing every card each time is what made the page stall).
    const sig = {
      tab: this.tab,
      all: this.allCalls,
      calls: this.tab === "calls" ? v.calls.length > 0 : 0,
      r: this.tab === "decisions" ? v.reviews : 0,
      p: this.tab === "decisions" ? v.plans : 0,
      n: this.tab === "timeline" || this.tab === "model" ? [this.events.length, this.at] : 0,
      sel: this.tab === "timeline" ? this.selected : null,
      inspecting: this.tab === "model" ? this.inspecting : null,
    };
    renderIfChanged(this.parts.tabs, sig, () => {
      const focused = /** @type {HTMLElement | null} */ (document.activeElement)?.dataset?.tab;
      const bar = h(
        "div",
        { class: "tabs", role: "tablist", "aria-label": "Activity" },
        tabs.map(([key, label]) =>
          h(
            "button",
            {
              type: "button",
              role: "tab",
              id: `tab-${key}`,
              "aria-selected": this.tab === key ? "true" : "false",
              "aria-controls": "tab-panel",
              tabindex: this.tab === key ? 0 : -1,
              dataset: { tab: key },
              onclick: () => {
                this.tab = key;
                this.renderTabs();
                document.getElementById(`tab-${key}`)?.focus();
              },
              onkeydown: (e) => {
                const i = tabs.findIndex(([k]) => k === key);
                const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
                if (!d) return;
                e.preventDefault();
                this.tab = tabs[(i + d + tabs.length) % tabs.length][0];
                this.renderTabs();
                document.getElementById(`tab-${this.tab}`)?.focus();
              },
            },
            label,
          ),
        ),
      );
      const out = [bar, h("div", { class: "tab-panel", id: "tab-panel", role: "tabpanel", "aria-labelledby": `tab-${this.tab}` }, panel())];
      if (focused) queueMicrotask(() => document.getElementById(`tab-${focused}`)?.focus());
      return out;
    });
    for (const [key, label] of tabs) {
      const b = document.getElementById(`tab-${key}`);
      if (b && b.textContent !== label) b.textContent = label;
    }
    if (this.tab === "calls" && v.calls.length && this.callList && this.moreCalls) {
      // The latest calls first; all of them on request (a large plan has a thousand).
      const shown = this.allCalls ? v.calls : v.calls.slice(-CALLS_SHOWN);
      keyedList(this.callList, [...shown].reverse(), (c) => c.call_id, (c) => c, (c) => callCard(c, jump));
      const more = v.calls.length - shown.length;
      renderIfChanged(this.moreCalls, more, () =>
        more > 0 ? h("button", { type: "button", class: "button small", id: "all-calls", onclick: () => ((this.allCalls = true), this.renderTabs()) }, `Show the ${count(more)} earlier calls`) : null,
      );
    }
    if (this.tab === "events" && this.eventList) {
      const at = this.at ?? this.lastSeq();
      /** @type {Map<number, number>} each model call's place among the session's model calls */
      const calls = new Map();
      for (const e of this.events) if (e.type === "model_replied" || e.type === "model_failed") calls.set(e.seq, calls.size + 1);
      keyedList(this.eventList, this.events, (e) => e.seq, (e) => e.seq === at, (e) => eventItem(e, calls.get(e.seq) ?? 0, e.seq === at, jump, inspect));
    }
  }
}

/**
 * An event in the Events tab: a button that shows the session at it, and for a model call an
 * Inspect button.
 * @param {StoredEvent} e
 * @param {number} call the model call's number, 0 for another event
 * @param {boolean} current whether the session is shown at this event
 * @param {(seq: number) => void} jump
 * @param {(call: number) => void} inspect
 */
function eventItem(e, call, current, jump, inspect) {
  return h(
    "li",
    {},
    h(
      "button",
      { type: "button", "aria-current": current ? "true" : null, onclick: () => jump(e.seq), title: pretty(e) },
      h("span", {}, `#${e.seq}`),
      h("span", { class: "t" }, e.type),
      h("span", { class: "d" }, describe(e)),
    ),
    call > 0 && h("button", { type: "button", class: "button small ghost inspect", dataset: { call: String(call) }, "aria-label": `Inspect model call ${call}`, onclick: () => inspect(call) }, "Inspect"),
  );
}

/** A few words about an event, for the slider and the event list. */
/**
 * A short account of an event, after its type.
 * @param {StoredEvent} stored
 */
function describe(stored) {
  // Each event type's own fields are not in the API's schema (`StoredEvent` names the envelope).
  /** @type {any} */
  const e = stored;
  switch (stored.type) {
    case "turn_started":
      return ` "${cut(e.task, 60)}"`;
    case "wave_started":
      return ` ${e.wave}: ${e.steps.join(", ")}`;
    case "wave_finished":
      return ` ${e.wave}`;
    case "step_started":
      return ` ${e.step} (attempt ${e.attempt})`;
    case "step_completed":
      return ` ${e.step}`;
    case "step_failed":
      return ` ${e.step}: ${e.error.kind}`;
    case "step_skipped":
      return ` ${e.step}: ${cut(e.reason, 50)}`;
    case "step_retrying":
      return ` ${e.step} in ${e.delay_ms} ms`;
    case "tool_call_started":
      return ` ${e.tool}${e.step ? ` (${e.step})` : ""}${e.untrusted_from?.length ? " · untrusted output" : ""}`;
    case "tool_call_blocked":
      return ` ${e.tool}: ${cut(e.reason, 80)}`;
    case "tool_call_finished":
      return ` ${e.outcome.status}${e.outcome.error ? `: ${e.outcome.error.kind}` : ""} in ${e.duration_ms} ms`;
    case "review_decided":
      return ` ${e.decision}`;
    case "model_replied":
      return ` (${e.purpose})`;
    case "waiting_for_user":
      return ` ${e.request.kind}`;
    case "user_replied":
      return ` "${cut(e.text, 40)}"`;
    case "run_finished":
      return ` ${e.status}${e.error ? `: ${cut(e.error, 60)}` : ""}`;
    case "plan_accepted":
    case "plan_revised":
      return ` ${(e.plan || []).length} steps`;
    default:
      return "";
  }
}

/**
 * What the run and the session spent against each limit of the budget in force:
 * "run.cost_usd $0.12 of $0.25 · session.model_calls 4 of 100"; "" without a budget.
 * @param {import("./api-types").components["schemas"]["Spending"]} sp
 */
function budgetText(sp) {
  if (!sp?.budget) return "";
  const out = [];
  for (const scope of /** @type {const} */ (["run", "session"])) {
    const limits = /** @type {Record<string, number | null | undefined>} */ (sp.budget[scope] || {});
    const spent = /** @type {Record<string, number>} */ (/** @type {unknown} */ (sp[scope]));
    for (const key of ["cost_usd", "input_tokens", "output_tokens", "model_calls", "tool_calls"]) {
      const limit = limits[key];
      if (typeof limit === "number") out.push(`${scope}.${key} ${spentOf(key, spent[key] || 0, limit)}`);
    }
  }
  return out.join(" · ");
}
