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

  async function call(method, url, body) {
    const opts = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
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
          after(form, data, body);
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

  function summary(data) {
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

  document.addEventListener("DOMContentLoaded", wire);
  return { call, flash, ratesChart };
})();
