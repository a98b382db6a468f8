// @ts-check
// The sessions list: every session of the signed-in user across agents, newest first, with its
// status, agent, task, user, age and cost; filtered by status and agent; refreshed every few
// seconds while the page is visible.

import { api } from "./api.js";
import { h, fill, age, when, usageText, cut } from "./dom.js";
import { sayApiError } from "./errors.js";

/** @typedef {import("./api-types").components["schemas"]["SessionList"]} SessionListData */
/** @typedef {import("./api-types").components["schemas"]["Summary"]} Summary */
/** @typedef {import("./api-types").components["schemas"]["AgentInfo"]} AgentInfo */

const STATUSES = [
  ["", "All"],
  ["running", "Running"],
  ["waiting_for_user", "Waiting"],
  ["completed", "Completed"],
  ["failed", "Failed"],
];

const LABEL = {
  running: "running",
  waiting_for_user: "waiting",
  completed: "completed",
  failed: "failed",
};

export class SessionList {
  /** @param {HTMLElement} root @param {AgentInfo[]} agents */
  constructor(root, agents) {
    this.root = root;
    this.agents = agents;
    this.status = "";
    this.agent = "";
    /** @type {string | null} */
    this.current = null;
    this.timer = 0;
    /** @type {SessionListData | null} */
    this.data = null;
    this.error = null;
    this.build();
  }

  build() {
    this.seg = h(
      "div",
      { class: "seg", role: "group", "aria-label": "Filter by status" },
      STATUSES.map(([value, text]) =>
        h(
          "button",
          {
            type: "button",
            "aria-pressed": value === this.status ? "true" : "false",
            dataset: { status: value },
            onclick: () => {
              this.status = value;
              this.seg.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.status === value)));
              this.refresh();
            },
          },
          text,
        ),
      ),
    );
    this.agentSelect = h(
      "select",
      {
        id: "filter-agent",
        "aria-label": "Filter by agent",
        onchange: () => {
          this.agent = this.agentSelect.value;
          this.refresh();
        },
      },
      h("option", { value: "" }, "All agents"),
      this.agents.map((a) => h("option", { value: a.name }, a.name)),
    );
    this.list = h("ul", { class: "session-list", id: "session-list", "aria-label": "Sessions" });
    this.foot = h("div", { class: "list-foot", "aria-live": "polite" });
    fill(this.root, h("div", { class: "filters" }, this.seg, this.agentSelect), this.list, this.foot);
  }

  /** Marks the session shown in the main view. */
  select(id) {
    this.current = id;
    this.list.querySelectorAll(".session-item").forEach((a) => {
      if (a.dataset.id === id) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    });
  }

  start() {
    this.stopped = false;
    this.refresh();
  }

  /** Stops polling for good (signing out): no request leaves once this is called. */
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async refresh() {
    clearTimeout(this.timer);
    if (this.stopped) return;
    const q = new URLSearchParams({ limit: "100" });
    if (this.status) q.set("status", this.status);
    if (this.agent) q.set("agent", this.agent);
    try {
      this.data = await api(`/sessions?${q}`);
      this.error = null;
    } catch (e) {
      this.error = e;
    }
    // Signed out while the request was on its way: nothing more is drawn or asked.
    if (this.stopped) return;
    this.render();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.poll(), 2500);
  }

  poll() {
    if (this.stopped) return;
    if (document.visibilityState === "visible") this.refresh();
    else this.timer = setTimeout(() => this.poll(), 2500);
  }

  render() {
    if (this.error && !this.data) {
      fill(this.list, h("li", { class: "empty" }, sayApiError(this.error, "The sessions could not be listed")));
      return;
    }
    const sessions = this.data?.sessions || [];
    if (!sessions.length) {
      fill(
        this.list,
        h(
          "li",
          { class: "empty" },
          this.status || this.agent ? "No session matches these filters." : ["No session yet. ", h("a", { href: "#/new" }, "Start a run"), "."],
        ),
      );
    } else {
      // Keep the focused item focused across refreshes.
      const focused = /** @type {HTMLElement | null | undefined} */ (document.activeElement?.closest?.(".session-item"))?.dataset.id;
      fill(this.list, sessions.map((s) => this.item(s)));
      if (focused) this.list.querySelector(`.session-item[data-id="${CSS.escape(focused)}"]`)?.focus();
    }
    const more = this.data?.more ? " (more: narrow the filters)" : "";
    this.foot.textContent = this.error
      ? sayApiError(this.error, "Refreshing failed")
      : `${sessions.length} session${sessions.length === 1 ? "" : "s"}${more} · updated ${new Date().toLocaleTimeString()}`;
  }

  /** @param {Summary} s */
  item(s) {
    const status = s.busy && s.status === "running" ? "running" : s.status;
    const label = s.waiting === "paused" ? "paused" : LABEL[status] || status;
    const money = usageText(s.usage);
    return h(
      "li",
      {},
      h(
        "a",
        {
          class: "session-item",
          href: `#/s/${encodeURIComponent(s.id)}`,
          dataset: { id: s.id, status: s.status },
          "aria-current": s.id === this.current ? "page" : null,
          "aria-label": `${cut(s.task || "(no task)", 80)}: ${s.agent}, ${label}, ${age(s.updated_at)}`,
        },
        h("span", { class: ["dot", status], title: label }),
        h("span", { class: "task" }, s.task || h("span", { class: "faint" }, "(no task yet)")),
        h("time", { class: "age", datetime: s.updated_at, title: when(s.updated_at) }, age(s.updated_at)),
        h(
          "span",
          { class: "meta" },
          h("span", {}, s.agent || "—"),
          h("span", {}, label),
          s.user && h("span", {}, s.user),
          money && h("span", { title: "tokens and cost" }, money),
          s.parent_id && h("span", { title: `from ${s.parent_id}` }, "fork"),
        ),
      ),
    );
  }
}
