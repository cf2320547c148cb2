// rmqcore console: forms and buttons that call the JSON API, body tabs, the overview's live chart (plotly).
"use strict";
const RMQ = (() => {
  const flash = (text, err) => {
    const el = document.getElementById("flash");
    if (!el) return;
    el.textContent = text;
    el.className = "flash" + (err ? " err" : "");
    el.hidden = false;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => { el.hidden = true; }, err ? 8000 : 2500);
  };

  // The server's change token, given in the page: every change sends it (the server refuses changes without it,
  // so that no other site's page can make this browser change anything).
  const token = () => {
    const meta = document.querySelector('meta[name="rmq-csrf-token"]');
    return meta ? meta.content : "";
  };

  async function call(method, url, body) {
    const opts = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
    if (method !== "GET" && method !== "HEAD") opts.headers["X-RMQ-CSRF-Token"] = token();
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(url, opts);
    let data = null;
    try { data = await resp.json(); } catch (e) { data = { error: resp.statusText }; }
    if (!resp.ok) throw new Error((data && data.error) || resp.statusText);
    return data;
  }

  function formBody(form) {
    const body = {};
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") body[el.name] = el.checked;
      else if (el.value !== "") body[el.name] = el.value;
    }
    return body;
  }

  function after(el, data, body) {
    let target = el.dataset.redirect;
    if (target) {
      target = target.replace(/\{(\w+)\}/g, (_, k) => encodeURIComponent(body[k] || ""));
      location.assign(target);
    } else {
      setTimeout(() => location.reload(), 600);
    }
  }

  function wire() {
    for (const form of document.querySelectorAll("form[data-api]")) {
      form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        if (form.dataset.confirm && !confirm(form.dataset.confirm)) return;
        const body = formBody(form);
        const button = form.querySelector("button[type=submit]");
        if (button) button.disabled = true;
        try {
          const data = await call(form.dataset.method || "POST", form.dataset.api, body);
          flash(summary(data));
          if (form.dataset.result) showResult(document.getElementById(form.dataset.result), data);
          else after(form, data, body);
        } catch (e) {
          flash(e.message, true);
        } finally {
          if (button) button.disabled = false;
        }
      });
    }
    for (const button of document.querySelectorAll("button[data-api]")) {
      button.addEventListener("click", async () => {
        if (button.dataset.confirm && !confirm(button.dataset.confirm)) return;
        button.disabled = true;
        try {
          const data = await call(button.dataset.method || "POST", button.dataset.api,
                                  button.dataset.method === "DELETE" ? undefined : {});
          flash(summary(data));
          after(button, data, {});
        } catch (e) {
          flash(e.message, true);
          button.disabled = false;
        }
      });
    }
    for (const tab of document.querySelectorAll(".tab[data-tab]")) {
      tab.addEventListener("click", () => {
        for (const t of document.querySelectorAll(".tab[data-tab]")) t.classList.toggle("active", t === tab);
        for (const p of document.querySelectorAll("[data-pane]")) p.hidden = p.dataset.pane !== tab.dataset.tab;
      });
    }
  }

  // A form that shows its answer in place (data-result): a sent message's ids, or consumed messages as a table.
  // Built with textContent only: bodies are whatever producers sent.
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function showResult(target, data) {
    if (!target) return;
    target.replaceChildren();
    if (data.msg_id && data.status) {
      const p = el("p", null, "result");
      p.append("Stored in queue " + data.queue_id + " at offset " + data.queue_offset + " · ");
      const a = el("a", data.msg_id, "mono");
      a.href = "/messages/" + data.commitlog_offset;
      p.append(a);
      target.append(p);
      return;
    }
    const items = data.items || [];
    if (!items.length) { target.append(el("p", "No message to consume.", "muted")); return; }
    const table = el("table", null, "data");
    const head = el("tr");
    for (const h of ["Queue · offset", "Message id", "Tags", "Keys", "Body"]) head.append(el("th", h));
    table.append(el("thead")); table.tHead.append(head);
    const body = el("tbody");
    for (const m of items) {
      const tr = el("tr");
      const link = el("a", m.queue_id + " · " + m.queue_offset);
      link.href = "/messages/" + m.commitlog_offset;
      const td = el("td", null, "num"); td.append(link); tr.append(td);
      tr.append(el("td", m.uniq_key || m.msg_id, "mono"));
      tr.append(el("td", m.tags || "–"));
      tr.append(el("td", (m.keys || []).join(" ") || "–"));
      tr.append(el("td", m.text + (m.text_truncated ? " …" : ""), "body-head"));
      body.append(tr);
    }
    table.append(body);
    target.append(table);
    target.append(el("p", data.committed ? "Offsets committed past these." : "Offsets unchanged.", "muted"));
  }

  function summary(data) {
    if (data.changed) return "Changed " + Object.keys(data.changed).length + " setting(s)";
    if (data.msg_id && data.status) return "Sent " + data.msg_id;
    if (data.items && data.group && data.topic) return data.items.length + " message(s) for " + data.group;
    if (data.deleted) return "Deleted " + data.deleted;
    if (data.resent !== undefined) return "Resent to " + data.topic + " (queue " + data.queue_id + ")";
    if (data.queues && data.group) return "Reset " + data.queues.length + " queue(s) of " + data.group;
    if (data.topic && data.topic.topic) return (data.created ? "Created " : "Updated ") + data.topic.topic;
    if (data.group && data.group.group) return (data.created ? "Created " : "Updated ") + data.group.group;
    return "Done";
  }

  function ratesChart(id) {
    const el = document.getElementById(id);
    if (!el || !window.Plotly) return;
    const layout = {
      margin: { l: 48, r: 16, t: 8, b: 36 }, height: 300, hovermode: "x unified",
      legend: { orientation: "h", y: 1.12, x: 0 },
      xaxis: { type: "date", gridcolor: "#eef1f7" }, yaxis: { title: { text: "msg/s" }, rangemode: "tozero", gridcolor: "#eef1f7" },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { size: 12 },
    };
    const config = { displayModeBar: false, responsive: true };
    const draw = async () => {
      try {
        const s = await call("GET", "/api/v1/series?seconds=300");
        const x = s.t.map((t) => new Date(t));
        // The last five minutes, or the time since the first sample (at least 30 s) on a server just started.
        const now = Date.now();
        const first = s.t.length ? s.t[0] - 1000 : now - 300000;
        layout.xaxis.range = [new Date(Math.min(Math.max(first, now - 300000), now - 30000)), new Date(now)];
        Plotly.react(el, [
          { x, y: s.in, name: "in (produced)", type: "scatter", mode: "lines", line: { color: "#2f6fde", width: 2 }, fill: "tozeroy", fillcolor: "rgba(47,111,222,.08)" },
          { x, y: s.out, name: "out (delivered)", type: "scatter", mode: "lines", line: { color: "#1f9d55", width: 2 } },
          { x, y: s.stored, name: "records stored", type: "scatter", mode: "lines", line: { color: "#d98b00", width: 1.5, dash: "dot" } },
        ], layout, config);
      } catch (e) { /* the next tick retries */ }
    };
    draw();
    setInterval(draw, 2000);
  }

  // A topic's or group's trend (a point a minute, kept across restarts): data-history is its API path,
  // data-series the fields to draw (in; consumed, lag).
  function trendChart(id) {
    const el = document.getElementById(id);
    if (!el || !window.Plotly) return;
    const names = { in: "stored / s", consumed: "consumed / s", lag: "lag" };
    const colors = { in: "#2f6fde", consumed: "#1f9d55", lag: "#d98b00" };
    const layout = {
      margin: { l: 48, r: 48, t: 8, b: 36 }, height: 240, hovermode: "x unified",
      legend: { orientation: "h", y: 1.15, x: 0 },
      xaxis: { type: "date", gridcolor: "#eef1f7" },
      yaxis: { title: { text: "msg/s" }, rangemode: "tozero", gridcolor: "#eef1f7" },
      yaxis2: { title: { text: "lag" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)", font: { size: 12 },
    };
    const draw = async () => {
      try {
        const s = await call("GET", el.dataset.history);
        const x = s.t.map((t) => new Date(t));
        if (!x.length) {
          el.textContent = "The first points come a minute after the server starts (one a minute, kept for a day).";
          el.classList.add("empty");
          return;
        }
        const traces = el.dataset.series.split(",").map((k) => ({
          x, y: s[k], name: names[k], type: "scatter", mode: "lines+markers", marker: { size: 4 },
          line: { color: colors[k], width: 2 }, yaxis: k === "lag" ? "y2" : "y",
        }));
        Plotly.react(el, traces, layout, { displayModeBar: false, responsive: true });
      } catch (e) { /* the next tick retries */ }
    };
    draw();
    setInterval(draw, 60000);
  }

  document.addEventListener("DOMContentLoaded", wire);
  return { call, flash, ratesChart, trendChart };
})();
