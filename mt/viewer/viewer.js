/*
 * MtViewer: look at a translation model's attention and at one word's vectors, in any browser,
 * with no network, no framework and no build step. One entry point:
 *
 *     MtViewer.render(element, data)
 *
 * draws into `element` (its children are replaced). `mt attention --html` and `mt vectors
 * --html` inline this file and their data in one HTML page; a server page loads this same file
 * and passes the JSON its attention endpoint returns.
 *
 * THE DATA FORMAT (the one place it is written down; Python builds it in
 * mt.views.attention.attention_json and mt.views.vectors.WordVectors.to_json)
 *
 * Attention, `data.view === "attention"`:
 *   {
 *     "view": "attention",
 *     "source": "Ein Hund rennt.",            // the sentence
 *     "translation": "A dog runs.",           // the model's beam-search output
 *     "kinds": [                              // in this order: encoder, decoder (none for an SSRU decoder), cross
 *       {"id": "encoder", "label": "encoder self-attention",
 *        "rows": ["▁Ein", ..., "</s>"],       // query tokens, one per row
 *        "cols": ["▁Ein", ..., "</s>"],       // key tokens, one per column
 *        "weights": [layer][head][row][col]}, // floats, each row sums to 1
 *       {"id": "decoder", "label": "decoder self-attention", ...},  // rows: predicted tokens,
 *                                             // cols: decoder inputs ("<s>", pieces)
 *       {"id": "cross", "label": "encoder-decoder attention", ...}  // rows: predicted, cols: source
 *     ],
 *     "alignment": {"src_tokens": [...], "tgt_tokens": [...],   // tgt without the final </s>
 *                   "pairs": [[src_index, tgt_index], ...]}     // 0-based
 *   }
 * Layers and heads are 0-based in the data and shown 1-based; "mean" is the mean over heads.
 *
 * Vectors, `data.view === "vectors"` (mt vectors --json prints the same object):
 *   {
 *     "view": "vectors", "word": "Bank",
 *     "depths": ["embedding", "layer 1", ...],
 *     "explained_variance": [0.41, 0.22],     // share of variance along x and y
 *     "centred": false,                       // true: each depth's mean removed before PCA
 *     "occurrences": [
 *       {"sentence": "...", "position": 5,    // first piece's index among the encoder tokens
 *        "tokens": ["▁Bank"], "context": "auf einer Bank sitzt",
 *        "vectors": [[...d_model floats] per depth],
 *        "xy": [[x, y] per depth],            // the shared PCA projection
 *        "pushed_by": [{"depth": "layer 1",
 *                       "keys": [{"token": "▁Mann", "position": 1, "along": 0.6}, ...]}, ...]}
 *     ]
 *   }
 */
(function (global) {
  "use strict";

  var SVGNS = "http://www.w3.org/2000/svg";
  // Colour scale from 0 (light) to 1 (dark): stops of a perceptually ordered blue-green map.
  var STOPS = [
    [0.0, [247, 251, 255]],
    [0.25, [198, 219, 239]],
    [0.5, [107, 174, 214]],
    [0.75, [33, 113, 181]],
    [1.0, [8, 48, 107]]
  ];
  // One colour per occurrence, in the order of matplotlib's tab10 (the PNG's colours).
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

  function colour(w) {
    var x = Math.max(0, Math.min(1, w));
    for (var i = 1; i < STOPS.length; i++) {
      if (x <= STOPS[i][0]) {
        var a = STOPS[i - 1], b = STOPS[i], t = (x - a[0]) / (b[0] - a[0]);
        var c = a[1].map(function (v, k) { return Math.round(v + t * (b[1][k] - v)); });
        return "rgb(" + c.join(",") + ")";
      }
    }
    return "rgb(" + STOPS[STOPS.length - 1][1].join(",") + ")";
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  var uid = 0;
  function select(label, options, onChange) {
    var id = "mtv-select-" + (++uid);
    var wrap = el("div");
    wrap.appendChild(el("label", { "for": id }, label));
    var s = el("select", { id: id });
    options.forEach(function (o) { s.appendChild(el("option", { value: o[0] }, o[1])); });
    s.addEventListener("change", onChange);
    wrap.appendChild(s);
    return { wrap: wrap, select: s };
  }

  function scaleLegend() {
    var box = el("div", { "class": "mtv-scale", "aria-hidden": "true" });
    var bar = el("div", { "class": "mtv-scale-bar" });
    bar.style.background = "linear-gradient(to right, " + STOPS.map(function (s) {
      return colour(s[0]) + " " + s[0] * 100 + "%";
    }).join(", ") + ")";
    box.appendChild(el("span", {}, "weight 0"));
    box.appendChild(bar);
    box.appendChild(el("span", {}, "1"));
    return box;
  }

  /* The weights of one kind, layer and head ("mean": the mean over heads). */
  function matrix(kind, layer, head) {
    var heads = kind.weights[layer];
    if (head !== "mean") return heads[Number(head)];
    return heads[0].map(function (row, i) {
      return row.map(function (_, j) {
        var s = 0;
        for (var h = 0; h < heads.length; h++) s += heads[h][i][j];
        return s / heads.length;
      });
    });
  }

  function renderAttention(root, data) {
    var kinds = data.kinds;
    var nLayers = kinds[0].weights.length, nHeads = kinds[0].weights[0].length;
    root.appendChild(el("h2", {}, data.source + "  \u2192  " + data.translation));
    var controls = el("div", { "class": "mtv-controls" });
    var kindSel = select("Attention", kinds.map(function (k) { return [k.id, k.label]; }), redraw);
    // Open on what a reader asks first: which source words each output word came from.
    if (kinds.some(function (k) { return k.id === "cross"; })) kindSel.select.value = "cross";
    var layerOptions = [];
    for (var l = 0; l < nLayers; l++) {
      layerOptions.push([String(l), "layer " + (l + 1) + " of " + nLayers + (l === nLayers - 1 ? " (last)" : "")]);
    }
    var layerSel = select("Layer", layerOptions, redraw);
    layerSel.select.value = String(nLayers - 1);
    var headOptions = [["mean", "mean of " + nHeads + " heads"]];
    for (var h = 0; h < nHeads; h++) headOptions.push([String(h), "head " + (h + 1)]);
    var headSel = select("Head", headOptions, redraw);
    [kindSel, layerSel, headSel].forEach(function (s) { controls.appendChild(s.wrap); });
    controls.appendChild(scaleLegend());
    root.appendChild(controls);
    var status = el("div", { "class": "mtv-status", role: "status", "aria-live": "polite" },
                    "Hover or focus a cell to read its weight.");
    root.appendChild(status);
    var gridBox = el("div", { "class": "mtv-gridbox" });
    root.appendChild(gridBox);
    if (data.alignment) root.appendChild(alignmentPicture(data.alignment));

    function redraw() {
      var kind = kinds.filter(function (k) { return k.id === kindSel.select.value; })[0];
      var layer = Number(layerSel.select.value), head = headSel.select.value;
      var m = matrix(kind, layer, head);
      var table = el("table", { "class": "mtv-grid" });
      var headLabel = head === "mean" ? "mean of heads" : "head " + (Number(head) + 1);
      table.appendChild(el("caption", {}, kind.label + ", layer " + (layer + 1) + " of " + nLayers +
        ", " + headLabel + ". Rows are queries, columns keys; each row sums to 1. " +
        "Arrow keys move between cells."));
      var thead = el("thead"), tr = el("tr");
      tr.appendChild(el("td"));
      kind.cols.forEach(function (c) { tr.appendChild(el("th", { scope: "col" }, c)); });
      thead.appendChild(tr);
      table.appendChild(thead);
      var tbody = el("tbody");
      m.forEach(function (row, i) {
        var r = el("tr");
        r.appendChild(el("th", { scope: "row" }, kind.rows[i]));
        row.forEach(function (w, j) {
          var text = "weight " + w.toFixed(4) + ": query " + kind.rows[i] + " \u2192 key " + kind.cols[j];
          var td = el("td", { tabindex: "-1", "data-row": i, "data-col": j, "data-weight": String(w),
                              "aria-label": text, title: text });
          td.style.background = colour(w);
          td.addEventListener("mouseenter", function () { show(td, text); });
          td.addEventListener("focus", function () { show(td, text); });
          r.appendChild(td);
        });
        tbody.appendChild(r);
      });
      table.appendChild(tbody);
      var first = tbody.querySelector("td");
      if (first) first.setAttribute("tabindex", "0");  // one tab stop; arrows move inside
      table.addEventListener("keydown", function (ev) { move(table, ev); });
      gridBox.replaceChildren(table);
      status.textContent = "Hover or focus a cell to read its weight.";
    }

    function show(td, text) {
      status.textContent = text;
      var table = td.closest("table");
      table.querySelectorAll(".mtv-hot").forEach(function (n) { n.classList.remove("mtv-hot"); });
      td.parentNode.firstChild.classList.add("mtv-hot");
      table.tHead.rows[0].cells[Number(td.dataset.col) + 1].classList.add("mtv-hot");
    }
    redraw();
  }

  function move(table, ev) {
    var d = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[ev.key];
    var td = ev.target;
    if (!d || td.tagName !== "TD" || td.dataset.row === undefined) return;
    var next = table.querySelector('td[data-row="' + (Number(td.dataset.row) + d[0]) +
                                   '"][data-col="' + (Number(td.dataset.col) + d[1]) + '"]');
    if (next) {
      ev.preventDefault();
      td.setAttribute("tabindex", "-1");
      next.setAttribute("tabindex", "0");
      next.focus();
    }
  }

  /* Source tokens above, target tokens below, a line for each aligned pair. */
  function alignmentPicture(al) {
    var box = el("div", { "class": "mtv-alignment" });
    box.appendChild(el("h2", {}, "Alignment (each target token's most-attended source token, last layer, mean of heads)"));
    var step = 70, width = Math.max(al.src_tokens.length, al.tgt_tokens.length) * step + 20;
    var pic = svg("svg", { width: width, height: 150, role: "img",
      "aria-label": "alignment: " + al.pairs.map(function (p) {
        return al.tgt_tokens[p[1]] + " \u2190 " + al.src_tokens[p[0]];
      }).join(", ") });
    function x(i) { return 10 + step / 2 + i * step; }
    al.pairs.forEach(function (p) {
      pic.appendChild(svg("line", { x1: x(p[0]), y1: 32, x2: x(p[1]), y2: 118,
                                    stroke: "#2171b5", "stroke-width": 1.5, "class": "mtv-link" }));
    });
    al.src_tokens.forEach(function (t, i) {
      pic.appendChild(svg("text", { x: x(i), y: 20, "text-anchor": "middle" }, t));
    });
    al.tgt_tokens.forEach(function (t, i) {
      pic.appendChild(svg("text", { x: x(i), y: 140, "text-anchor": "middle" }, t));
    });
    box.appendChild(pic);
    return box;
  }

  function renderVectors(root, data) {
    var occ = data.occurrences, ev = data.explained_variance || [0, 0];
    root.appendChild(el("h2", {}, "\u201c" + data.word + "\u201d from its embedding through " +
                        (data.depths.length - 1) + " encoder layers (one PCA for all points" +
                        (data.centred ? "; each depth's mean over the occurrences removed" : "") +
                        ")"));
    var status = el("div", { "class": "mtv-status", role: "status", "aria-live": "polite" },
                    "Hover or focus a point to see which keys pushed it.");
    var W = 760, H = 460, pad = 50;
    var xs = [], ys = [];
    occ.forEach(function (o) { o.xy.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    function sx(v) { return pad + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * (W - 2 * pad - 160); }
    function sy(v) { return H - pad - (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5) * (H - 2 * pad); }
    var pic = svg("svg", { width: W, height: H, role: "group",
                           "aria-label": "paths of " + data.word + " through the encoder" });
    pic.appendChild(svg("text", { x: W / 2 - 80, y: H - 12, "text-anchor": "middle" },
                        "PC 1 (" + (100 * ev[0]).toFixed(0) + "% of variance)"));
    pic.appendChild(svg("text", { x: 14, y: H / 2, transform: "rotate(-90 14 " + H / 2 + ")",
                                  "text-anchor": "middle" },
                        "PC 2 (" + (100 * ev[1]).toFixed(0) + "%)"));
    occ.forEach(function (o, k) {
      var c = PALETTE[k % PALETTE.length];
      var pts = o.xy.map(function (p) { return sx(p[0]) + "," + sy(p[1]); }).join(" ");
      pic.appendChild(svg("polyline", { points: pts, fill: "none", stroke: c, "stroke-width": 2 }));
      o.xy.forEach(function (p, d) {
        var pushed = d > 0 ? o.pushed_by[d - 1].keys.map(function (q) {
          return q.token + " (" + q.along.toFixed(2) + ")";
        }).join(", ") : "";
        var text = o.context + " \u2014 " + data.depths[d] + " at (" + p[0].toFixed(2) + ", " +
                   p[1].toFixed(2) + ")" + (pushed ? "; pushed most by " + pushed : "");
        var dot = svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: d === 0 ? 4 : 6, fill: c,
                                  "class": "mtv-point", tabindex: "0", role: "img",
                                  "aria-label": text, "data-occurrence": k, "data-depth": d });
        dot.appendChild(svg("title", {}, text));
        dot.addEventListener("mouseenter", function () { status.textContent = text; });
        dot.addEventListener("focus", function () { status.textContent = text; });
        pic.appendChild(dot);
        pic.appendChild(svg("text", { x: sx(p[0]) + 7, y: sy(p[1]) - 7, fill: c },
                            d === 0 ? "E" : String(d)));
      });
      var last = o.xy[o.xy.length - 1];
      pic.appendChild(svg("text", { x: sx(last[0]) + 12, y: sy(last[1]) + 14, fill: c },
                          o.context));
    });
    root.appendChild(pic);
    root.appendChild(status);
    // The same numbers as a table: who pushed each occurrence in each layer.
    var table = el("table", { "class": "mtv-pushes" });
    table.appendChild(el("caption", {}, "Keys that pushed each occurrence most, by length along its move"));
    var head = el("tr");
    ["occurrence"].concat(data.depths.slice(1)).forEach(function (h) {
      head.appendChild(el("th", { scope: "col" }, h));
    });
    table.appendChild(head);
    occ.forEach(function (o, k) {
      var tr = el("tr"), th = el("th", { scope: "row" });
      var sw = el("span", { "class": "mtv-swatch", "aria-hidden": "true" });
      sw.style.background = PALETTE[k % PALETTE.length];
      th.appendChild(sw);
      th.appendChild(document.createTextNode(o.context));
      tr.appendChild(th);
      o.pushed_by.forEach(function (p) {
        tr.appendChild(el("td", {}, p.keys.map(function (q) {
          return q.token + " " + q.along.toFixed(2);
        }).join(", ")));
      });
      table.appendChild(tr);
    });
    root.appendChild(table);
  }

  function render(element, data) {
    element.replaceChildren();
    var root = el("div", { "class": "mtv" });
    element.appendChild(root);
    if (data.view === "vectors") renderVectors(root, data);
    else renderAttention(root, data);
    return root;
  }

  global.MtViewer = { render: render, colour: colour };
})(typeof window !== "undefined" ? window : this);
