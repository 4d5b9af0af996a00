// kimi-mcp dashboard: draws what the server sent as data (a change's unified diff, the usage numbers)
// with the vendored libraries; htmx (and its SSE extension) keeps the views live. No inline script: the
// page's Content-Security-Policy allows none.
(function () {
  "use strict";

  function drawDiffs(root) {
    if (typeof Diff2Html === "undefined") return;
    root.querySelectorAll("pre.diff-source").forEach(function (source) {
      var target = source.nextElementSibling;
      if (!target || !target.classList.contains("diff") || target.dataset.drawn) return;
      target.innerHTML = Diff2Html.html(source.textContent, {
        drawFileList: false,
        matching: "lines",
        outputFormat: "line-by-line",
      });
      target.dataset.drawn = "1";
      source.hidden = true;
    });
  }

  function drawUsage() {
    var data = document.getElementById("usage-data");
    var canvas = document.getElementById("usage-chart");
    if (!data || !canvas || typeof Chart === "undefined") return;
    var usage = JSON.parse(data.textContent);
    var datasets = Object.keys(usage.models).map(function (model) {
      return { type: "bar", label: model, data: usage.models[model], stack: "tokens" };
    });
    if (usage.daily) {
      datasets.push({
        type: "line",
        label: "KIMI_MCP_DAILY_TOKENS",
        data: usage.days.map(function () { return usage.daily; }),
        borderDash: [6, 4],
        pointRadius: 0,
        borderColor: "#c0392b",
      });
    }
    new Chart(canvas, {
      data: { labels: usage.days, datasets: datasets },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, title: { display: true, text: "tokens" } } },
      },
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawDiffs(document);
    drawUsage();
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    drawDiffs(event.target);
  });
})();
