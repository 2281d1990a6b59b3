// sbx ui: the live parts of a sandbox's page. The server renders
// everything else; this only adds the decisions its stream sends, as
// text (textContent), newest first, and keeps the pending approvals as
// they come and go: a new question gets a copy of the page's own row
// template (its answer forms and their CSRF token are the server's), an
// answered one goes, and each one's time left counts down. Whenever the
// questions shown change (the page loads, one comes, one goes), their
// buttons are disabled for a moment (the server's AnswerDelay), so that
// a click meant for a question that just went does not land on the one
// that took its place.
"use strict";
(function () {
  // timeLeft writes ms as the server does: "42s", "1m30s", "0s".
  function timeLeft(ms) {
    var s = Math.max(0, Math.ceil(ms / 1000));
    return s >= 60 ? Math.floor(s / 60) + "m" + (s % 60) + "s" : s + "s";
  }

  function approvals(events) {
    var table = document.getElementById("approvals");
    var template = document.getElementById("approval-row");
    if (!table || !template) {
      return;
    }
    var body = table.tBodies[0];
    var none = document.getElementById("no-approvals");
    var count = document.getElementById("approvals-count");
    function rowOf(id) {
      for (var i = 0; i < body.rows.length; i++) {
        if (body.rows[i].dataset.approval === id) {
          return body.rows[i];
        }
      }
      return null;
    }
    var delay = 1000; // ms, the server's AnswerDelay
    // hold disables the answer buttons of row tr for delay ms from now: a
    // row new on the page, or one that moved under the pointer, takes no
    // click meant for what was there before. Rows that stay where they
    // are stay clickable.
    function hold(tr) {
      tr.querySelectorAll("form.answer button").forEach(function (b) {
        b.disabled = true;
      });
      clearTimeout(tr.armed);
      tr.armed = setTimeout(function () {
        tr.querySelectorAll("form.answer button").forEach(function (b) {
          b.disabled = false;
        });
      }, delay);
    }
    function changed() {
      var n = body.rows.length;
      none.hidden = n > 0;
      count.textContent = n > 0 ? "(" + n + ")" : "";
    }
    function tick() {
      for (var i = 0; i < body.rows.length; i++) {
        var tr = body.rows[i];
        var left = tr.querySelector(".left");
        if (left && tr.dataset.deadline) {
          left.textContent = timeLeft(Number(tr.dataset.deadline) - Date.now());
        }
      }
    }
    events.addEventListener("approval", function (e) {
      var a = JSON.parse(e.data);
      if (rowOf(a.id)) {
        return; // on the page already
      }
      var tr = template.content.querySelector("tr").cloneNode(true);
      tr.dataset.approval = a.id;
      tr.dataset.deadline = String(a.deadline);
      var cells = {
        id: a.id, target: a.target, request: (a.kind || "") + " " + (a.request || ""), client: a.client,
        why: a.why, asked: a.asked, left: a.left, waiting: String(a.waiting)
      };
      Object.keys(cells).forEach(function (k) {
        tr.querySelector("." + k).textContent = cells[k] || "";
      });
      tr.querySelectorAll("form").forEach(function (f) {
        f.setAttribute("action", table.dataset.answer + encodeURIComponent(a.id));
      });
      body.appendChild(tr);
      hold(tr);
      changed();
    });
    events.addEventListener("answered", function (e) {
      var tr = rowOf(JSON.parse(e.data).id);
      if (tr) {
        // The rows below it move up into its place.
        for (var next = tr.nextElementSibling; next; next = next.nextElementSibling) {
          hold(next);
        }
        tr.remove();
        changed();
      }
    });
    Array.prototype.forEach.call(body.rows, hold);
    tick();
    setInterval(tick, 1000);
  }

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
    approvals(events);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
