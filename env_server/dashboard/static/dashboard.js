// Keeps /dashboard live: one EventSource, and every snapshot redrawn into the page the server rendered.
// Text goes in with textContent only: task ids and flags are never parsed as HTML.
"use strict";

(function () {
  const root = document.getElementById("dashboard");
  if (!root) return;
  const SVG = "http://www.w3.org/2000/svg";
  let seen = new Set(Array.from(document.querySelectorAll("#recent tr[data-episode]"), (row) => row.dataset.episode));
  let updates = 0;

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (value < 1) return `${Math.round(value * 1000)} ms`;
    if (value < 120) return `${value.toFixed(1)} s`;
    return `${(value / 60).toFixed(1)} min`;
  }
  const reward = (value) => (value === null || value === undefined ? "–" : value.toFixed(2));
  const when = (iso) => iso.replace("T", " ").slice(0, 19);

  function setField(name, text) {
    for (const el of document.querySelectorAll(`[data-field="${name}"]`)) el.textContent = text;
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function bars(id, values, labels, unit, formatTop) {
    const svg = document.getElementById(id);
    if (!svg) return;
    const width = 300, height = 90, pad = 12, n = values.length;
    const top = Math.max(0, ...values.map((v) => v || 0));
    svg.replaceChildren();
    values.forEach((value, i) => {
      const v = value || 0, h = top ? (v / top) * height : 0, w = width / n;
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("x", i * w + 1);
      rect.setAttribute("y", pad + height - h);
      rect.setAttribute("width", Math.max(0, w - 2));
      rect.setAttribute("height", h);
      rect.setAttribute("class", "bar");
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${labels[i]}: ${value === null ? "–" : value}${unit}`;
      rect.appendChild(title);
      svg.appendChild(rect);
    });
    const axis = document.createElementNS(SVG, "line");
    for (const [k, v] of [["x1", 0], ["y1", pad + height], ["x2", width], ["y2", pad + height], ["class", "axis"]]) axis.setAttribute(k, v);
    svg.appendChild(axis);
    const topLabel = document.createElementNS(SVG, "text");
    topLabel.setAttribute("x", 2);
    topLabel.setAttribute("y", 9);
    topLabel.setAttribute("class", "chart-top");
    topLabel.textContent = formatTop ? formatTop(top) : String(top);
    svg.appendChild(topLabel);
  }

  function flag(text) {
    return el("span", text, text.startsWith("tampered") ? "flag flag-tampered" : "flag");
  }

  function recentRow(e) {
    const row = el("tr");
    row.dataset.episode = e.episode_id;
    const started = el("td");
    const link = el("a", when(e.started_at));
    link.href = `/episodes/${encodeURIComponent(e.episode_id)}/view`;
    started.appendChild(link);
    const task = el("td");
    task.appendChild(el("code", e.task_id));
    const status = el("td");
    status.appendChild(el("span", e.status, `status-${e.status}`));
    const flags = el("td");
    e.flags.forEach((f) => { flags.appendChild(flag(f)); flags.append(" "); });
    row.append(started, task, status, el("td", reward(e.reward)), el("td", e.steps), el("td", seconds(e.duration_s)), flags);
    if (!seen.has(e.episode_id)) row.classList.add("fresh");
    return row;
  }

  function taskRow(t) {
    const row = el("tr");
    row.id = `task-${t.task_id}`;
    const name = el("td");
    name.appendChild(el("code", t.task_id));
    const rate = el("td");
    if (t.graded) {
      const bar = el("span", null, "rate"), fill = el("span", null, "rate-fill");
      fill.style.width = `${(100 * t.passed) / t.graded}%`;
      bar.appendChild(fill);
      rate.append(bar, ` ${Math.round((100 * t.passed) / t.graded)}%`);
    } else {
      rate.textContent = "–";
    }
    row.append(name, el("td", t.episodes), el("td", t.graded), rate, el("td", reward(t.mean_reward)), el("td", t.tampered || ""));
    return row;
  }

  function emptyRow(columns, text) {
    const row = el("tr", null, "empty"), cell = el("td", text, "muted");
    cell.colSpan = columns;
    row.appendChild(cell);
    return row;
  }

  function render(s) {
    const h = s.health;
    setField("health", h.status);
    document.getElementById("engine").className = `badge ${h.status === "healthy" ? "ok" : "bad"}`;
    setField("taken_at", when(s.taken_at));
    setField("active", h.active_episodes);
    setField("max", h.max_episodes);
    setField("free", h.free_slots);
    setField("rate", s.episodes_per_minute.toFixed(1));
    setField("p50", seconds(s.latency_p50_s));
    setField("p95", seconds(s.latency_p95_s));
    setField("latency_steps", s.latency_steps);
    setField("graded", s.rewards.graded);
    setField("tampered", s.rewards.tampered);
    setField("backlog", s.trace_backlog);
    setField("twins_forged", s.twins_forged);
    setField("twins_graded", s.twins_graded);
    setField("episodes_total", Object.values(s.rewards.by_status).reduce((a, b) => a + b, 0));
    for (const fill of document.querySelectorAll('[data-meter="capacity"]')) {
      fill.style.width = `${h.max_episodes ? (100 * h.active_episodes) / h.max_episodes : 0}%`;
    }

    const pools = document.getElementById("pools");
    pools.replaceChildren(...(s.pools.length ? s.pools.map((p) => {
      const item = el("li"), count = el("span", null, "pool-count"), name = el("code", p.name, "pool-name");
      count.append(el("b", p.ready), `/${p.size} ready`);
      item.append(count);
      if (p.failures) item.append(" · ", el("span", `${p.failures} failed`, "error"));
      name.title = p.image;
      item.append(name);
      return item;
    }) : [el("li", "no warm pool", "muted")]));

    const minuteLabels = s.minutes.map((m) => `${m.minute} min ago`);
    bars("chart-episodes", s.minutes.map((m) => m.episodes), minuteLabels, " ended");
    bars("chart-latency", s.minutes.map((m) => m.p95_s), minuteLabels, " s", seconds);
    bars("chart-rewards", s.rewards.counts, s.rewards.bins, " episodes");

    const statuses = document.getElementById("statuses");
    statuses.replaceChildren(...Object.keys(s.rewards.by_status).sort().flatMap((k) => [el("span", `${k} ${s.rewards.by_status[k]}`, "chip"), " "]));

    const recent = document.getElementById("recent");
    recent.replaceChildren(...(s.recent.length ? s.recent.map(recentRow) : [emptyRow(7, "no episode recorded yet")]));
    seen = new Set(s.recent.map((e) => e.episode_id));
    const tasks = document.getElementById("tasks");
    tasks.replaceChildren(...(s.tasks.length ? s.tasks.map(taskRow) : [emptyRow(6, "no task played yet")]));
    document.getElementById("tasks-left-out").textContent = s.tasks_left_out ? `and ${s.tasks_left_out} more task(s) not listed` : "";

    const traceError = document.getElementById("trace-error");
    traceError.textContent = s.trace_error || "";
    traceError.hidden = !s.trace_error;

    updates += 1;
    root.dataset.updates = String(updates);
  }

  // The server-rendered bars get their widths here: the page's policy allows no inline style.
  for (const fill of document.querySelectorAll(".rate-fill[data-rate]")) fill.style.width = `${100 * Number(fill.dataset.rate)}%`;

  const live = document.getElementById("live");
  const source = new EventSource("/dashboard/events");
  source.addEventListener("open", () => { live.dataset.state = "open"; });
  source.addEventListener("error", () => { live.dataset.state = "error"; });
  source.addEventListener("snapshot", (event) => {
    live.dataset.state = "open";
    render(JSON.parse(event.data));
  });
})();
