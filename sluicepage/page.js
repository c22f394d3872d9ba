(function () {
  "use strict";
  // Every value from the data is written as text (textContent), never as
  // HTML: keys and names are whatever clients and operators sent.
  var url = location.pathname + "?format=json";
  var delay = 2000;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function body(id) {
    var b = document.querySelector("#" + id + " .body");
    b.replaceChildren();
    return b;
  }
  function cell(row, text, cls) { row.appendChild(el("td", cls, text)); }
  function table(box, heads) {
    var t = el("table"), h = el("tr");
    heads.forEach(function (x) { h.appendChild(el("th", null, x)); });
    t.appendChild(h);
    box.appendChild(t);
    return t;
  }
  // usable writes a section's state into box, and reports whether the
  // section has data to show.
  function usable(box, sec) {
    if (!sec || sec.status === "not_enabled") { box.appendChild(el("p", "muted", "not enabled")); return false; }
    if (sec.status !== "ok") { box.appendChild(el("p", "err", "error: " + (sec.error || "unknown"))); return false; }
    return true;
  }
  function more(box, n) { if (n > 0) { box.appendChild(el("p", "muted", "and " + n + " more")); } }
  function none(box, list, what) {
    if (!list || list.length === 0) { box.appendChild(el("p", "muted", what)); return true; }
    return false;
  }
  function when(t) { var d = new Date(t); return isNaN(d) ? String(t) : d.toLocaleTimeString(); }

  function health(sec) {
    var box = body("health");
    if (!usable(box, sec)) { return; }
    var h = sec.data;
    box.appendChild(el("span", "badge " + (h.ready ? "ready" : "down"), h.ready ? "ready" : "not ready"));
    if (h.cause) { box.appendChild(el("p", "cause", h.cause)); }
    if (h.ack_misses > 0) { box.appendChild(el("p", null, "replica acknowledgements missed: " + h.ack_misses)); }
    var out = h.outages || [];
    if (out.length > 0) {
      box.appendChild(el("h3", null, "Open outages"));
      var t = table(box, ["node", "since", "error"]);
      out.forEach(function (o) {
        var r = el("tr");
        cell(r, o.node, "key"); cell(r, when(o.since)); cell(r, o.error);
        t.appendChild(r);
      });
      more(box, sec.more);
    }
  }
  function fleet(sec) {
    var box = body("fleet");
    if (!usable(box, sec)) { return; }
    if (sec.data > 0) {
      box.appendChild(el("span", "big", sec.data)).id = "fleet-size";
      box.appendChild(el("p", "muted", sec.data === 1 ? "live instance" : "live instances"));
    } else {
      box.appendChild(el("p", "muted", "not counted (no fleet)"));
    }
  }
  function limits(sec) {
    var box = body("limits");
    if (!usable(box, sec) || none(box, sec.data, "no limits listed")) { return; }
    var t = table(box, ["name", "limits"]);
    sec.data.forEach(function (l) {
      var r = el("tr");
      cell(r, l.name); cell(r, (l.limits || []).join("; "), "key");
      t.appendChild(r);
    });
    more(box, sec.more);
  }
  // ranked writes one ranking of a limit's keys: by the count named by,
  // with a bar against the largest, then the other count.
  function ranked(box, title, keys, by, other, err) {
    var part = el("div", "rank");
    part.appendChild(el("h4", null, title + (err > 0 ? " (\u00b1" + err + ")" : "")));
    box.appendChild(part);
    if (none(part, keys, "none")) { return; }
    var peak = 1;
    keys.forEach(function (k) { peak = Math.max(peak, k[by]); });
    var t = table(part, ["key", by, "", other]);
    keys.forEach(function (k) {
      var r = el("tr"), bar = el("td"), track = el("div", "track"), fill = el("div", "fill");
      fill.style.width = (100 * k[by] / peak).toFixed(1) + "%";
      track.appendChild(fill); bar.appendChild(track);
      cell(r, k.key, "key"); cell(r, k[by], "num"); r.appendChild(bar); cell(r, k[other], "num");
      t.appendChild(r);
    });
  }
  function top(sec) {
    var box = body("top");
    if (!usable(box, sec) || none(box, sec.data, "no limit counted")) { return; }
    sec.data.forEach(function (tl) {
      box.appendChild(el("h3", null, tl.limit + " \u00b7 admitted " + tl.admitted + ", denied " + tl.denied +
        " since " + when(tl.since)));
      var pair = el("div", "pair");
      box.appendChild(pair);
      ranked(pair, "by admitted cost", tl.by_admitted, "admitted", "denied", tl.admitted_error);
      ranked(pair, "by denials", tl.by_denied, "denied", "admitted", tl.denied_error);
    });
    more(box, sec.more);
  }
  function warnings(sec) {
    var box = body("warnings");
    if (!usable(box, sec) || none(box, sec.data, "none")) { return; }
    var t = table(box, ["limit", "key", "threshold", "remaining", "at", "until"]);
    sec.data.forEach(function (w) {
      var r = el("tr");
      cell(r, w.limit); cell(r, w.key, "key"); cell(r, Math.round(100 * w.threshold) + "%", "num");
      cell(r, w.remaining, "num"); cell(r, when(w.at)); cell(r, when(w.until));
      t.appendChild(r);
    });
    more(box, sec.more);
  }
  function overrides(sec) {
    var box = body("overrides");
    if (!usable(box, sec) || none(box, sec.data, "no sets shown")) { return; }
    sec.data.forEach(function (s) {
      box.appendChild(el("h3", null, s.name + " \u00b7 version " + s.version + " \u00b7 " + s.len + (s.len === 1 ? " entry" : " entries")));
      var entries = s.entries || [];
      if (none(box, entries, "empty")) { return; }
      var t = table(box, ["key", "override"]);
      entries.forEach(function (o) {
        var r = el("tr");
        cell(r, o.key, "key"); cell(r, o.value, "key");
        t.appendChild(r);
      });
      more(box, s.len - entries.length);
    });
    more(box, sec.more);
  }

  function state(cls, text) {
    document.getElementById("state").className = "dot " + cls;
    document.getElementById("status").textContent = text;
  }
  function render(s) {
    health(s.health); fleet(s.fleet); limits(s.limits); top(s.top); warnings(s.warnings); overrides(s.overrides);
  }
  function tick() {
    fetch(url, { cache: "no-store", credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (s) {
        render(s);
        if (s.refresh_ms > 0) { delay = s.refresh_ms; }
        state("live", "updated " + when(s.time));
      })
      .catch(function (e) { state("stale", "refresh failed: " + e.message); })
      .finally(function () { setTimeout(tick, delay); });
  }
  tick();
})();
