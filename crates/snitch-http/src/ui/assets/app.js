// Snitch dashboard: progressive enhancement only; every page works without it.
"use strict";
(function () {
  var fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

  // Times: the viewer's zone in the text, UTC on hover (title, set by the server).
  document.querySelectorAll("time[data-local]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) { el.textContent = fmt.format(d); }
  });

  // Deadline countdowns, updated every second.
  function span(ms) {
    var n = Math.floor(Math.abs(ms) / 1000);
    var d = Math.floor(n / 86400), h = Math.floor(n / 3600) % 24, m = Math.floor(n / 60) % 60, s = n % 60;
    var text = d > 0 ? d + " d " + h + " h" : h > 0 ? h + " h " + m + " min" : m > 0 ? m + " min " + s + " s" : s + " s";
    return ms >= 0 ? "in " + text : text + " ago";
  }
  var countdowns = document.querySelectorAll("time[data-countdown]");
  function tick() {
    var now = Date.now();
    countdowns.forEach(function (el) {
      el.textContent = span(new Date(el.getAttribute("datetime")).getTime() - now);
    });
  }
  if (countdowns.length) { tick(); setInterval(tick, 1000); }

  // Copy buttons: copy the value of the input they name.
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var input = document.getElementById(button.getAttribute("data-copy"));
      var said = button.parentElement.querySelector(".copied");
      function done(ok) { if (said) { said.textContent = ok ? "Copied." : "Select the URL and copy it."; } }
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(function () { done(true); }, function () { input.select(); done(false); });
      } else {
        input.select();
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        done(ok);
      }
    });
  });

  // A schedule's next runs as it is typed: in the viewer's zone and the schedule's.
  var preview = document.getElementById("schedule-preview");
  var schedule = document.getElementById("schedule");
  var zone = document.getElementById("timezone");
  if (preview && schedule && zone) {
    var timer = null, asked = 0;
    function clear() { while (preview.firstChild) { preview.removeChild(preview.firstChild); } }
    function say(text, cls) {
      var p = document.createElement("p");
      p.textContent = text;
      if (cls) { p.className = cls; }
      preview.appendChild(p);
    }
    function show() {
      var expr = schedule.value.trim();
      var n = ++asked;
      if (!expr) { clear(); return; }
      var url = preview.getAttribute("data-preview") + "?schedule=" + encodeURIComponent(expr) +
        "&timezone=" + encodeURIComponent(zone.value.trim() || "UTC");
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
        .then(function (answer) {
          if (n !== asked) { return; }
          clear();
          if (!answer.ok) {
            var errors = (answer.body && answer.body.validations) || [];
            say(errors.length ? errors.map(function (v) { return v.attribute + ": " + v.message; }).join("; ")
              : "This schedule cannot be read.", "problem-text");
            return;
          }
          say("Next runs (your time, then the schedule's):");
          var list = document.createElement("ul");
          answer.body.times.forEach(function (t, i) {
            var li = document.createElement("li");
            li.textContent = fmt.format(new Date(t)) + " (" + answer.body.local[i] + ")";
            list.appendChild(li);
          });
          preview.appendChild(list);
          (answer.body.warnings || []).forEach(function (w) { say(w); });
        })
        .catch(function () { if (n === asked) { clear(); } });
    }
    function later() { clearTimeout(timer); timer = setTimeout(show, 300); }
    schedule.addEventListener("input", later);
    zone.addEventListener("input", later);
    if (schedule.value.trim()) { show(); }
  }

  // Pause until a time: send it as UTC, read in the viewer's zone.
  document.querySelectorAll("form.pause").forEach(function (form) {
    var at = form.querySelector("input[name=until_at]");
    var utc = form.querySelector("input[name=until_utc]");
    at.addEventListener("input", function () {
      var radio = form.querySelector("input[name=until][value=at]");
      if (radio && at.value) { radio.checked = true; }
    });
    form.addEventListener("submit", function () {
      var d = at.value ? new Date(at.value) : null;
      utc.value = d && !isNaN(d) ? d.toISOString() : "";
    });
  });
})();
