// The gallery's script: filter, sort, 3D views. It loads only files beside the page (classic scripts, which
// browsers run from pages opened from disk) and reports what the browser test checks on <body> and on each card:
// data-errors (errors seen), data-drawn (share of the 3D view's pixels drawn).
(function () {
  "use strict";
  var body = document.body;
  var errors = 0;
  function bump() { errors += 1; body.setAttribute("data-errors", String(errors)); }
  var consoleError = console.error;
  console.error = function () { bump(); return consoleError.apply(console, arguments); };
  window.addEventListener("error", bump, true);
  window.addEventListener("unhandledrejection", bump);

  var main = document.getElementById("cards");
  var cards = Array.prototype.slice.call(main.querySelectorAll("article.card"));

  function filter() {
    var q = document.getElementById("filter").value.trim().toLowerCase();
    var shown = 0;
    cards.forEach(function (c) {
      var hit = !q || c.getAttribute("data-text").indexOf(q) >= 0;
      c.classList.toggle("hidden", !hit);
      if (hit) { shown += 1; }
    });
    document.getElementById("shown").textContent = String(shown);
  }

  function num(c, name) {
    var v = c.getAttribute(name);
    return v === "" || v === null ? NaN : Number(v);
  }

  function sort() {
    var how = document.getElementById("sort").value;
    var key = {
      "order": function (a, b) { return num(a, "data-order") - num(b, "data-order"); },
      "score-desc": function (a, b) { return cmp(num(b, "data-score"), num(a, "data-score")); },
      "score-asc": function (a, b) { return cmp(num(a, "data-score"), num(b, "data-score")); },
      "seconds-asc": function (a, b) { return cmp(num(a, "data-seconds"), num(b, "data-seconds")); },
      "prompt": function (a, b) { return a.getAttribute("data-prompt").localeCompare(b.getAttribute("data-prompt")); }
    }[how];
    cards.slice().sort(function (a, b) { return key(a, b) || num(a, "data-order") - num(b, "data-order"); })
      .forEach(function (c) { main.appendChild(c); });
  }

  // Numbers first (in order), cards without one last.
  function cmp(x, y) {
    if (isNaN(x) || isNaN(y)) { return (isNaN(x) ? 1 : 0) - (isNaN(y) ? 1 : 0); }
    return x - y;
  }

  function loadScript(src, done) {
    var s = document.createElement("script");
    s.src = src;
    s.onload = done;
    s.onerror = function () { console.error("the gallery could not load " + src); };
    document.head.appendChild(s);
  }

  var viewer = { state: 0, waiting: [] };
  function withViewer(done) {
    if (viewer.state === 2) { done(); return; }
    viewer.waiting.push(done);
    if (viewer.state === 1) { return; }
    viewer.state = 1;
    loadScript(body.getAttribute("data-viewer"), function () {
      viewer.state = 2;
      viewer.waiting.splice(0).forEach(function (f) { f(); });
    });
  }

  function open3d(card) {
    var box = card.querySelector(".view3d");
    if (!box || box.querySelector("model-viewer")) { return; }
    var key = card.getAttribute("data-key");
    withViewer(function () {
      loadScript(card.getAttribute("data-glb"), function () {
        var mv = document.createElement("model-viewer");
        mv.setAttribute("camera-controls", "");
        mv.setAttribute("alt", "3D view of " + card.querySelector("h2").textContent);
        mv.addEventListener("load", function () { measure(mv, card); });
        mv.addEventListener("error", function (e) {
          console.error("3D view of " + key + ": " + JSON.stringify(e.detail && e.detail.type));
        });
        mv.src = window.CLIPSCULPT_GLB[key];
        var button = box.querySelector("button");
        if (button) { box.removeChild(button); }
        box.appendChild(mv);
      });
    });
  }

  // The share of the view's pixels that are drawn (its background is transparent), on the card.
  function measure(mv, card) {
    window.setTimeout(function () {
      var img = new Image();
      img.onload = function () {
        var c = document.createElement("canvas");
        c.width = img.width; c.height = img.height;
        var g = c.getContext("2d");
        g.drawImage(img, 0, 0);
        var d = g.getImageData(0, 0, c.width, c.height).data, n = 0;
        for (var i = 3; i < d.length; i += 4) { if (d[i] > 0) { n += 1; } }
        card.setAttribute("data-drawn", (n / Math.max(1, d.length / 4)).toFixed(4));
      };
      img.src = mv.toDataURL("image/png");
    }, 300);
  }

  main.addEventListener("click", function (e) {
    var t = e.target;
    if (t && t.classList && t.classList.contains("open3d")) { open3d(t.closest("article.card")); }
  });
  document.getElementById("filter").addEventListener("input", filter);
  document.getElementById("sort").addEventListener("change", sort);

  // #3d=all or #3d=KEY,KEY opens those cards' 3D views on load.
  var m = /(?:^#|&)3d=([^&]*)/.exec(window.location.hash);
  if (m) {
    var want = decodeURIComponent(m[1]).split(",");
    cards.forEach(function (c) {
      if (c.hasAttribute("data-glb") && (want[0] === "all" || want.indexOf(c.getAttribute("data-key")) >= 0)) {
        open3d(c);
      }
    });
  }
  filter();
})();
