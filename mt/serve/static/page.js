/*
 * The page at /: translate as the user types (debounced), then show the n-best list, each
 * target token coloured by its probability (POST /v1/score on the best translation) and the
 * translation's attention drawn by the shared viewer (MtViewer.render on POST /v1/attention).
 * Only this server is ever asked for anything.
 */
(function () {
  "use strict";

  var DEBOUNCE_MS = 350;
  var src = document.getElementById("src");
  var status = document.getElementById("status");
  var out = document.getElementById("translation");
  var tokens = document.getElementById("tokens");
  var nbest = document.getElementById("nbest");
  var attention = document.getElementById("attention");
  var nbestSize = 1, timer = null, seq = 0;

  function post(path, body) {
    return fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (data) {
        if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
        return data;
      });
    });
  }

  // White (p = 0) to a dark green (p = 1); text turns white on dark cells.
  function tokenColour(p) {
    var x = Math.max(0, Math.min(1, p));
    var c = [Math.round(247 - x * (247 - 0)), Math.round(252 - x * (252 - 109)),
             Math.round(245 - x * (245 - 44))];
    return "rgb(" + c.join(",") + ")";
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function showTokens(scored) {
    clear(tokens);
    scored.tokens.forEach(function (t, i) {
      var p = Math.exp(scored.token_logprobs[i]);
      var span = document.createElement("span");
      span.className = "tok";
      span.textContent = t;
      span.tabIndex = 0;
      span.style.background = tokenColour(p);
      span.style.color = p > 0.6 ? "#fff" : "#1b1b1b";
      span.title = t + ": p = " + p.toFixed(3);
      span.setAttribute("aria-label", t + ", probability " + p.toFixed(3));
      span.dataset.p = String(p);
      tokens.appendChild(span);
    });
  }

  function showNbest(item) {
    clear(nbest);
    item.nbest.forEach(function (h) {
      var li = document.createElement("li");
      li.appendChild(document.createTextNode(h.translation));
      var s = document.createElement("span");
      s.className = "score";
      s.textContent = h.score === null ? "" : h.score.toFixed(4);
      li.appendChild(s);
      nbest.appendChild(li);
    });
  }

  function run() {
    var text = src.value.replace(/\s+/g, " ").trim();
    var mine = ++seq;
    if (!text) {
      out.textContent = ""; clear(tokens); clear(nbest); clear(attention);
      status.textContent = "Type a sentence.";
      return;
    }
    status.textContent = "Translating…";
    var t0 = performance.now();
    post("/v1/translate", { items: [{ src: text }], options: { nbest: nbestSize } })
      .then(function (res) {
        if (mine !== seq) return null;
        var item = res.items[0];
        out.textContent = item.translation;
        showNbest(item);
        status.textContent = "Translated in " + Math.round(performance.now() - t0) + " ms.";
        return Promise.all([
          post("/v1/score", { items: [{ src: text, tgt: item.translation }] }),
          post("/v1/attention", { src: text })
        ]);
      })
      .then(function (both) {
        if (!both || mine !== seq) return;
        showTokens(both[0].items[0]);
        MtViewer.render(attention, both[1]);
        attention.dataset.source = both[1].source;
        document.body.dataset.ready = String(mine);
      })
      .catch(function (err) {
        if (mine === seq) status.textContent = "Error: " + err.message;
      });
  }

  src.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(run, DEBOUNCE_MS);
  });

  fetch("/v1/models").then(function (r) { return r.json(); }).then(function (data) {
    var m = data.models[0];
    if (!m || m.status !== "ready") {
      status.textContent = "The model is loading; reload in a moment.";
      return;
    }
    document.getElementById("pair").textContent = m.source_language + " → " + m.target_language;
    document.getElementById("src-label").textContent =
      "Source sentence (" + m.source_language + ")";
    document.getElementById("model-info").textContent = "model " + m.name + ", " +
      (m.parameters / 1e6).toFixed(1) + "M parameters";
    nbestSize = Math.min(5, m.config.decode.beam || 1);
    if (src.value.trim()) run();
  });
}());
