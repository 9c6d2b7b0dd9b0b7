// pgqueue dashboard: refresh the page's #live region every data-refresh
// seconds with htmx, only while the tab is visible (and at once when it
// comes back), never while the operator is selecting rows or typing in it,
// and less often after a failed refresh (doubling, up to a minute).
(function () {
  "use strict";
  var seconds = parseFloat(document.body.dataset.refresh || "0");
  if (!(seconds > 0) || typeof htmx === "undefined") return;
  var base = seconds * 1000, delay = base, timer = null, failed = false;

  function busy() {
    var live = document.getElementById("live");
    if (!live) return true;
    if (document.querySelector("input[type=checkbox]:checked")) return true;
    var active = document.activeElement;
    return !!(active && live.contains(active) && active !== document.body &&
              /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName));
  }
  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
  }
  function tick() {
    if (document.hidden) return; // visibilitychange starts again
    if (busy()) { schedule(base); return; }
    failed = false;
    htmx.ajax("GET", window.location.href, {target: "#live", select: "#live", swap: "outerHTML"})
      .then(function () {
        delay = failed ? Math.min(delay * 2, 60000) : base;
        schedule(delay);
      });
  }
  document.body.addEventListener("htmx:responseError", function () { failed = true; });
  document.body.addEventListener("htmx:sendError", function () { failed = true; });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) clearTimeout(timer); else schedule(0);
  });
  schedule(base);
})();
