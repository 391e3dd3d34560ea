// topiclake console: draws the charts (uPlot) from /ui/data/series. htmx does the rest (forms, live tail).
// Works without either library: pages are rendered on the server and forms post normally.
(function () {
  "use strict";
  const COLORS = ["#1f6f8b", "#d9822b", "#1b7f3b", "#8e44ad", "#b3261e", "#2c3e50", "#7f8c8d", "#c0a000", "#16a085"];

  function options(el, labels, unit) {
    return {
      width: Math.max(el.clientWidth, 200),
      height: 180,
      legend: { show: true },
      scales: { x: { time: true } },
      axes: [{}, { label: unit, size: 60 }],
      series: [{}].concat(labels.map((label, i) => ({
        label: label, stroke: COLORS[i % COLORS.length], width: i === 0 ? 2 : 1.3, spanGaps: true,
      }))),
    };
  }

  function setup(el) {
    const names = el.dataset.series.split(",");
    const labels = el.dataset.labels.split(",");
    const unit = el.dataset.unit || "";
    const empty = el.querySelector(".chart-empty");
    if (typeof window.uPlot === "undefined") {
      if (empty) empty.textContent = "Charts are off: uPlot is not installed (make install).";
      return;
    }
    let plot = null;
    let delay = 5000;
    async function refresh() {
      try {
        const query = names.map((n) => "name=" + encodeURIComponent(n)).join("&");
        const response = await fetch("/ui/data/series?" + query);
        if (response.ok) {
          const d = await response.json();
          if (d.interval_s) delay = Math.max(1000, Math.min(d.interval_s * 1000, 30000));
          if (d.t.length >= 2) {
            const data = [d.t].concat(names.map((n) => d.series[n] || d.t.map(() => null)));
            if (plot === null) {
              el.textContent = "";
              plot = new window.uPlot(options(el, labels, unit), data, el);
              el.dataset.drawn = "true";
            } else {
              plot.setData(data);
            }
          }
        }
      } catch (e) {
        // the broker is restarting or gone: try again later, quietly
      }
      window.setTimeout(refresh, delay);
    }
    window.addEventListener("resize", () => { if (plot) plot.setSize({ width: Math.max(el.clientWidth, 200), height: 180 }); });
    refresh();
  }

  document.querySelectorAll(".chart[data-series]").forEach(setup);
})();
