/* The allocator's live view: polls /api/v1/history and /api/v1/nodes. */
"use strict";
(() => {
  const { getJSON, esc, time, num, chart, poll } = flowcon;

  function jobRow(j) {
    const finish = j.state === "completed" ? j.finish_time : j.predicted_finish;
    const slack = j.deadline !== null && finish !== null && finish !== undefined ? j.deadline - finish : null;
    const cls = slack === null ? "" : slack < 0 ? "late" : "ok";
    return `<tr data-job="${esc(j.name)}"><td>${esc(j.name)}</td>` +
      `<td><span class="state ${esc(j.state)}">${esc(j.state)}</span></td>` +
      `<td class="num">${esc(j.gpus)}</td><td class="num">${num(100 * (j.progress || 0), 1)} %</td>` +
      `<td>${time(j.submit_time)}</td><td>${j.deadline === null ? "best effort" : time(j.deadline)}</td>` +
      `<td>${time(finish)}</td><td class="num ${cls}">${slack === null ? "–" : num(slack, 0)}</td>` +
      `<td>${esc(j.reason)}</td></tr>`;
  }

  function gpuSeries(points, jobs) {
    const names = [...new Set([...jobs.map((j) => j.name), ...points.flatMap((p) => Object.keys(p.jobs || {}))])]
      .filter((n) => points.some((p) => (p.jobs || {})[n] !== undefined));
    const xs = points.map((p) => p.ts);
    const series = {};
    for (const n of names) series[n] = points.map((p) => ((p.jobs || {})[n] ?? 0));
    return { xs, series };
  }

  function nodeRow(n, now) {
    const avoided = (n.avoided || []).map((a) =>
      `GPU ${esc(a.gpu)} (${esc(a.reason || "avoided")} of ${esc(a.job)}, ${num(Math.max(0, a.until - now), 0)} s left)`).join(", ");
    const cls = n.status === "Ready" ? "ok" : "late";
    return `<tr data-node="${esc(n.name)}"><td>${esc(n.name)}</td><td class="${cls}">${esc(n.status)}</td>` +
      `<td class="num">${esc(n.gpus)}</td><td class="num">${esc(n.used)}</td>` +
      `<td>${esc((n.jobs || []).join(", ") || "–")}</td><td>${avoided || "–"}</td></tr>`;
  }

  async function refresh() {
    const h = await getJSON("/api/v1/history");
    const nodes = await getJSON("/api/v1/nodes").catch(() => []);
    document.querySelector("#nodes tbody").innerHTML = nodes.length
      ? nodes.map((n) => nodeRow(n, h.now)).join("")
      : '<tr><td colspan="6" class="empty">no GPU inventory (GPU counts only)</td></tr>';
    const active = h.jobs.filter((j) => ["running", "admitted", "profiling"].includes(j.state)).length;
    document.getElementById("meta").textContent =
      `${h.total_gpus} GPUs · slot ${h.slot_seconds} s · ${h.jobs.length} jobs (${active} active) · ${time(h.now)}`;
    document.querySelector("#jobs tbody").innerHTML =
      h.jobs.length ? h.jobs.map(jobRow).join("") : '<tr><td colspan="9" class="empty">no jobs yet</td></tr>';
    const { xs, series } = gpuSeries(h.gpus, h.jobs);
    chart(document.getElementById("gpus"), "GPUs per job", xs, series, { ylabel: "GPUs", stepped: true, y: { range: [0, h.total_gpus] } });
    const adm = h.admissions.slice().reverse();
    document.querySelector("#admissions tbody").innerHTML = adm.length
      ? adm.map((a) => `<tr><td>${time(a.ts)}</td><td>${esc(a.job)}</td>` +
          `<td class="${a.admitted ? "ok" : "late"}">${a.admitted ? "admitted" : "dropped"}</td><td>${esc(a.reason)}</td></tr>`).join("")
      : '<tr><td colspan="4" class="empty">no decisions yet</td></tr>';
    document.body.dataset.loaded = "1";
  }
  poll(refresh, 5000);
})();
