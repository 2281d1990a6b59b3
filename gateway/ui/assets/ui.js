// sbx ui: the live decisions of a sandbox's page. The server renders
// everything else; this only adds the decisions its stream sends, as
// text (textContent), newest first.
"use strict";
(function () {
  function start() {
    var table = document.getElementById("decisions");
    if (!table || !window.EventSource) {
      return;
    }
    var body = table.tBodies[0];
    var live = document.getElementById("live");
    var classes = ["allow", "block", "intercept", "other"];
    var events = new EventSource(table.dataset.events);
    events.onopen = function () {
      live.textContent = "(live, newest first)";
    };
    events.onerror = function () {
      live.textContent = "(reconnecting…)";
    };
    events.addEventListener("decision", function (e) {
      var d = JSON.parse(e.data);
      var tr = document.createElement("tr");
      tr.className = "d " + (classes.indexOf(d.class) >= 0 ? d.class : "other");
      tr.dataset.seq = String(d.seq);
      [d.time, d.action, d.kind, d.method, d.target, d.path, d.rule, d.reason].forEach(function (v) {
        var td = document.createElement("td");
        td.textContent = v || "";
        tr.appendChild(td);
      });
      body.insertBefore(tr, body.firstChild);
      while (body.rows.length > 200) {
        body.deleteRow(body.rows.length - 1);
      }
    });
    events.addEventListener("end", function () {
      events.close();
      live.textContent = "(the sandbox's gateway stopped)";
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
