(function () {
  "use strict";
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr.clause"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("tbody.profile-group"));
  var controls = document.getElementById("matrix-controls");
  var select = document.getElementById("filter-outcome");
  var text = document.getElementById("filter-text");
  var count = document.getElementById("filter-count");
  var PROBLEMS = { fail: 1, error: 1, xfail: 1, not_offered: 1 };

  function apply() {
    var want = select.value, q = text.value.trim().toLowerCase(), shown = 0;
    rows.forEach(function (r) {
      var o = r.getAttribute("data-outcome");
      var okOutcome = want === "all" || (want === "problems" ? PROBLEMS[o] === 1 : o === want);
      var okText = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
      r.hidden = !(okOutcome && okText);
      if (!r.hidden) { shown += 1; }
    });
    groups.forEach(function (g) { g.hidden = !g.querySelector("tr.clause:not([hidden])"); });
    count.textContent = shown + " of " + rows.length + " clauses shown";
  }

  function fromHash() {
    var m = /only=([a-z_]+)/.exec(window.location.hash);
    if (m && select.querySelector('option[value="' + m[1] + '"]')) { select.value = m[1]; }
  }

  if (controls && select && text && count) {
    select.addEventListener("change", function () {
      try {
        history.replaceState(null, "", select.value === "all" ? "#clauses" : "#only=" + select.value);
      } catch (e) { /* some viewers forbid history changes on local files */ }
      apply();
    });
    text.addEventListener("input", apply);
    document.getElementById("expand-all").addEventListener("click", function () {
      var open = this.getAttribute("data-open") !== "1";
      document.querySelectorAll("#clauses details").forEach(function (d) { d.open = open; });
      this.setAttribute("data-open", open ? "1" : "0");
      this.textContent = open ? "Collapse tests" : "Expand tests";
    });
    controls.hidden = false;
    fromHash();
    apply();
  }

  document.querySelectorAll(".cmd-wrap").forEach(function (wrap) {
    var pre = wrap.querySelector("pre");
    var button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.addEventListener("click", function () {
      var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy"; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(pre.textContent).then(done, function () {});
      } else {
        var range = document.createRange();
        range.selectNodeContents(pre);
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        try { if (document.execCommand("copy")) { done(); } } catch (e) { /* selected; the reader copies */ }
      }
    });
    wrap.appendChild(button);
  });

  document.documentElement.setAttribute("data-js", "ready");
})();
