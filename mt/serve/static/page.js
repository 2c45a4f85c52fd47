/*
 * The page at /: translate as the user types (debounced), then show the n-best list, each
 * target token coloured by its probability (POST /v1/score on the best translation) and the
 * translation's attention drawn by the shared viewer (MtViewer.render on POST /v1/attention).
 * Only this server is ever asked for anything. A server started with --api-key-file answers
 * 401 without a key: the page then asks for one, keeps it for this tab only (sessionStorage)
 * and sends it as `Authorization: Bearer KEY` on every call. A model that translates several
 * directions gets From and To selectors (its languages, from /v1/models) and a swap button;
 * every call then names the target language (`to`).
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
  var keyForm = document.getElementById("key-form");
  var keyInput = document.getElementById("api-key");
  var KEY_ITEM = "mt-api-key";
  var langs = document.getElementById("langs");
  var fromSel = document.getElementById("from");
  var toSel = document.getElementById("to");
  var nbestSize = 1, timer = null, seq = 0, multilingual = false;

  function NeedsKey(message) { this.message = message; }

  // One call to this server: JSON in and out, the key (if any) attached. A 401 shows the key
  // form and rejects with NeedsKey, so callers stop without printing a second error.
  function call(method, path, body) {
    var headers = {};
    var key = sessionStorage.getItem(KEY_ITEM);
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, {
      method: method,
      headers: headers,
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (data) {
        if (r.status === 401) {
          askForKey(key ? "That API key was refused; enter another." :
                    "This server needs an API key.");
          throw new NeedsKey(data.error);
        }
        if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
        return data;
      });
    });
  }

  function post(path, body) { return call("POST", path, body); }

  function askForKey(message) {
    sessionStorage.removeItem(KEY_ITEM);
    status.textContent = message;
    keyForm.hidden = false;
    keyInput.focus();
  }

  keyForm.addEventListener("submit", function (event) {
    event.preventDefault();
    var key = keyInput.value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_ITEM, key);
    keyInput.value = "";
    keyForm.hidden = true;
    status.textContent = "Type a sentence.";
    loadModel();
  });

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
    var item0 = { src: text };
    var to = multilingual ? toSel.value : undefined;
    if (multilingual) { item0.to = to; item0.from = fromSel.value; }
    post("/v1/translate", { items: [item0], options: { nbest: nbestSize } })
      .then(function (res) {
        if (mine !== seq) return null;
        var item = res.items[0];
        out.textContent = item.translation;
        showNbest(item);
        // How far to trust it: confidence (log-probability per token) and doubt flags.
        var doubt = item.flags && item.flags.length ? "; doubtful: " + item.flags.join(", ") : "";
        var conf = typeof item.confidence === "number"
          ? ", confidence " + item.confidence.toFixed(2) : "";
        status.textContent = "Translated in " + Math.round(performance.now() - t0) + " ms" +
          conf + doubt + ".";
        return Promise.all([
          post("/v1/score", { items: [{ src: text, tgt: item.translation }], to: to }),
          post("/v1/attention", { src: text, to: to })
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
        if (mine === seq && !(err instanceof NeedsKey)) {
          status.textContent = "Error: " + err.message;
        }
      });
  }

  src.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(run, DEBOUNCE_MS);
  });

  function fill(select, codes, chosen) {
    clear(select);
    codes.forEach(function (c) {
      var o = document.createElement("option");
      o.value = c; o.textContent = c;
      select.appendChild(o);
    });
    if (codes.indexOf(chosen) >= 0) select.value = chosen;
  }

  // From -> To: the target may not be the source; changing either translates again.
  function showPair() {
    document.getElementById("pair").textContent = fromSel.value + " → " + toSel.value;
    document.getElementById("src-label").textContent = "Source sentence (" + fromSel.value + ")";
    out.lang = toSel.value;
  }

  function changed() { showPair(); if (src.value.trim()) run(); }
  fromSel.addEventListener("change", changed);
  toSel.addEventListener("change", changed);
  document.getElementById("swap").addEventListener("click", function () {
    var a = fromSel.value, b = toSel.value;
    fromSel.value = b; toSel.value = a;
    if (out.textContent) src.value = out.textContent;  // the translation becomes the source
    changed();
  });

  function loadModel() {
    call("GET", "/v1/models").then(showModel, function (err) {
      if (!(err instanceof NeedsKey)) status.textContent = "Error: " + err.message;
    });
  }

  function showModel(data) {
    var m = data.models[0];
    if (!m || m.status !== "ready") {
      status.textContent = "The model is loading; reload in a moment.";
      return;
    }
    var targets = [];
    (m.directions || []).forEach(function (d) {
      if (targets.indexOf(d[1]) < 0) targets.push(d[1]);
    });
    multilingual = targets.length > 1;
    if (multilingual) {
      fill(fromSel, m.languages, m.source_language);
      fill(toSel, m.languages, m.target_language);
      langs.hidden = false;
      showPair();
    } else {
      document.getElementById("pair").textContent =
        m.source_language + " → " + m.target_language;
      document.getElementById("src-label").textContent =
        "Source sentence (" + m.source_language + ")";
    }
    document.getElementById("model-info").textContent = "model " + m.name + ", " +
      (m.parameters / 1e6).toFixed(1) + "M parameters";
    nbestSize = Math.min(5, m.config.decode.beam || 1);
    src.focus();
    if (src.value.trim()) run();
  }

  loadModel();
}());
