/* Shared helpers of the live views (no framework; uPlot for the charts). */
"use strict";
const flowcon = (() => {
  // An access token, when the API needs one for reads: open the page as /ui#token=...
  const m = /token=([^&]+)/.exec(location.hash || "");
  if (m) sessionStorage.setItem("flowcon-token", decodeURIComponent(m[1]));
  const token = sessionStorage.getItem("flowcon-token");

  async function getJSON(url) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const resp = await fetch(url, { headers, cache: "no-store" });
    if (!resp.ok) throw new Error(url + ": HTTP " + resp.status);
    return resp.json();
  }
  function esc(s) {
    return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function time(ts) {
    if (ts === null || ts === undefined) return "–";
    const d = new Date(ts * 1000);
    return d.toISOString().replace("T", " ").slice(0, 19);
  }
  function num(x, digits = 2) {
    return x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(digits);
  }
  const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  // One uPlot chart per element, re-created when its series change.
  const charts = {};
  function chart(el, title, xs, series, opts = {}) {
    const names = Object.keys(series);
    const key = names.join("\u0001");
    const data = [xs, ...names.map((n) => series[n])];
    const prev = charts[el.id];
    if (prev && prev.key === key) { prev.plot.setData(data); return; }
    if (prev) prev.plot.destroy();
    el.innerHTML = "";
    const width = Math.max(300, el.clientWidth || 800);
    const plot = new uPlot({
      title, width, height: opts.height || 220,
      scales: { x: { time: true }, y: opts.y || {} },
      series: [{}, ...names.map((n, i) => ({ label: n, stroke: palette[i % palette.length], width: 2, spanGaps: false, paths: opts.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined }))],
      axes: [{}, { label: opts.ylabel || "" }],
    }, data, el);
    charts[el.id] = { key, plot };
  }
  function poll(fn, ms) {
    const run = async () => {
      try { await fn(); document.getElementById("error").textContent = ""; }
      catch (e) { document.getElementById("error").textContent = String(e); }
      setTimeout(run, ms);
    };
    run();
  }
  return { getJSON, esc, time, num, chart, poll };
})();
