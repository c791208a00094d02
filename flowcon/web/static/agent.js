/* The agent's per-host live view: polls /api/history. */
"use strict";
(() => {
  const { getJSON, esc, time, num, chart, poll } = flowcon;

  function seriesOf(points, field) {
    const ids = [...new Set(points.flatMap((p) => Object.keys(p.containers || {})))];
    const names = {};
    for (const p of points) for (const [id, c] of Object.entries(p.containers || {})) names[id] = c.name || id.slice(0, 12);
    const series = {};
    for (const id of ids) {
      series[names[id]] = points.map((p) => {
        const c = (p.containers || {})[id];
        const v = c ? c[field] : null;
        return v === undefined ? null : v;
      });
    }
    return { xs: points.map((p) => p.ts), series };
  }

  async function refresh() {
    const h = await getJSON("/api/history");
    const pts = h.points;
    const last = pts.length ? pts[pts.length - 1] : null;
    const current = last ? Object.entries(last.containers) : [];
    document.getElementById("meta").textContent =
      `node ${h.node} · ${h.host_cpus} CPUs · ${current.length} containers · itval ${last ? last.itval : "–"} s · last round ${last ? time(last.ts) : "–"}`;
    for (const list of ["NL", "WL", "CL"]) {
      const el = document.getElementById("list-" + list);
      const members = current.filter(([, c]) => c.list === list).map(([, c]) => `<div data-container="${esc(c.name)}">${esc(c.name)} <small>G ${num(c.g, 3)}</small></div>`);
      el.innerHTML = `<h3>${el.querySelector("h3").innerHTML}</h3>` + (members.join("") || '<span class="empty">empty</span>');
    }
    document.querySelector("#containers tbody").innerHTML = current.length
      ? current.map(([id, c]) => `<tr data-row="${esc(c.name)}" title="${esc(h.id_prefix + id)}"><td>${esc(c.name)}</td><td>${esc(c.job || "")}</td>` +
          `<td>${esc(c.list || "–")}</td><td class="num">${num(c.g, 3)}</td><td class="num">${num(c.limit, 3)}</td>` +
          `<td class="num">${c.cpus === null || c.cpus === undefined ? "original" : num(c.cpus, 2)}</td>` +
          `<td class="num">${num(100 * (c.cpu_share || 0), 1)} %</td><td class="num">${esc(c.step ?? "–")}</td></tr>`).join("")
      : '<tr><td colspan="8" class="empty">no containers opted in (label flowcon.enable=true)</td></tr>';
    const g = seriesOf(pts, "g");
    chart(document.getElementById("g"), "G", g.xs, g.series, { ylabel: "G" });
    const c = seriesOf(pts, "cpus");
    chart(document.getElementById("cpus"), "CPU limit", c.xs, c.series, { ylabel: "CPUs", stepped: true, y: { range: [0, h.host_cpus] } });
    document.body.dataset.loaded = "1";
  }
  poll(refresh, 5000);
})();
