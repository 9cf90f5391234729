/* The playground's guided tour: six steps from "what is this network" to "beat sampling under the budget".
 *
 * A small card beside the page, never a modal and never over it: while the tour is open the page makes
 * room for the card (body.pg-touring in playground.css: a gutter on the right of a wide window, space
 * below on a narrow one), so the card covers neither the part a step explains nor anything else, and the
 * page stays usable on every step. Each step outlines a part of the page (skipped when that part is not
 * drawn, e.g. the graph of a wide MLP). Finishing or skipping is remembered in localStorage; the "Tour"
 * button starts it again. Only runs on /playground.
 */
(function () {
  "use strict";
  var KEY = "whestboard.playground.tour";
  var STEPS = [
    {target: "#pg-controls", title: "1 / 6 · The MLP",
     text: "A random ReLU network with no biases: width neurons per layer, depth layers, every weight drawn " +
           "N(0, 2/width) from the seed by whestbench's own generator. Paste an official mlp_seed to get that MLP."},
    {target: "#pg-graph-network, #pg-graph-weights", title: "2 / 6 · The forward pass",
     text: "Inputs x ~ N(0, I); each layer computes h = ReLU(W h_prev). Red edges are positive weights, blue " +
           "negative; the weight panels show how the He scale keeps activations from exploding with depth."},
    {target: "#pg-graph-means", title: "3 / 6 · Neuron means",
     text: "The task: estimate E[h] for every neuron of every layer. This heatmap is the ground truth, layers " +
           "by neurons; dark cells are dead neurons that never fire."},
    {target: "#pg-truth-facts", title: "4 / 6 · Sampling",
     text: "The truth itself is Monte Carlo: N forward passes on the seed's own sampling stream. Its noise " +
           "floor σ²/N is the smallest MSE anyone can be told apart from; raise N to lower it."},
    {target: "#pg-graph-mse", title: "5 / 6 · Mean and covariance propagation",
     text: "White-box estimators push the distribution through the layers instead of samples. Per layer, " +
           "each estimator's MSE against the truth (log scale), with the truth's floor dashed."},
    {target: "#pg-summary", title: "6 / 6 · The challenge",
     text: "Every estimator here is metered by flopscope like the grader. Score = MSE × max(0.1, FLOPs/B): " +
           "beat sampling under the budget. See the Monte Carlo band on Convergence and the Leaderboard.",
     links: [["Convergence band", "/convergence"], ["Leaderboard", "/leaderboard"]]}
  ];
  var step = -1;
  var card = null;

  function onPlayground() { return window.location.pathname.replace(/\/+$/, "") === "/playground"; }
  function seen() { try { return window.localStorage.getItem(KEY) === "seen"; } catch (e) { return false; } }
  function remember() { try { window.localStorage.setItem(KEY, "seen"); } catch (e) { /* private mode */ } }

  function clearHighlight() {
    var marked = document.querySelectorAll(".pg-tour-target");
    for (var i = 0; i < marked.length; i++) { marked[i].classList.remove("pg-tour-target"); }
  }

  function targetOf(spec) {
    var names = spec.target.split(",");
    for (var i = 0; i < names.length; i++) {
      var el = document.querySelector(names[i].trim());
      if (el) { return el.closest(".card") || el; }
    }
    return null;
  }

  function button(id, label, primary) {
    var b = document.createElement("button");
    b.type = "button";
    b.id = id;
    b.className = "btn btn-sm " + (primary ? "btn-primary" : "btn-outline-secondary") + " ms-1";
    b.textContent = label;
    return b;
  }

  function build() {
    card = document.createElement("div");
    card.id = "pg-tour-card";
    card.setAttribute("role", "dialog");
    card.setAttribute("aria-live", "polite");
    card.className = "pg-tour-card card shadow";
    card.innerHTML = '<div class="card-body p-3"><div class="fw-semibold mb-1" id="pg-tour-title"></div>' +
      '<div class="small mb-2" id="pg-tour-text"></div><div class="small mb-2" id="pg-tour-links"></div>' +
      '<div class="d-flex justify-content-end" id="pg-tour-buttons"></div></div>';
    var row = card.querySelector("#pg-tour-buttons");
    var skip = button("pg-tour-skip", "Skip tour", false);
    var back = button("pg-tour-back", "Back", false);
    var next = button("pg-tour-next", "Next", true);
    skip.addEventListener("click", function () { finish(); });
    back.addEventListener("click", function () { show(step - 1); });
    next.addEventListener("click", function () { if (step >= STEPS.length - 1) { finish(); } else { show(step + 1); } });
    row.appendChild(skip); row.appendChild(back); row.appendChild(next);
    document.body.appendChild(card);
    makeRoom(true);
  }

  // The page narrows (or grows space below) to leave the card its own place; graphs redraw at the new width.
  function makeRoom(on) {
    document.body.classList.toggle("pg-touring", on);
    window.dispatchEvent(new Event("resize"));
  }

  function show(index) {
    if (index < 0) { index = 0; }
    if (!card) { build(); }
    step = index;
    var spec = STEPS[index];
    card.querySelector("#pg-tour-title").textContent = spec.title;
    card.querySelector("#pg-tour-text").textContent = spec.text;
    var links = card.querySelector("#pg-tour-links");
    links.textContent = "";
    (spec.links || []).forEach(function (pair, i) {
      var a = document.createElement("a");
      a.href = pair[1];
      a.textContent = pair[0];
      if (i) { links.appendChild(document.createTextNode(" · ")); }
      links.appendChild(a);
    });
    card.querySelector("#pg-tour-back").disabled = index === 0;
    card.querySelector("#pg-tour-next").textContent = index === STEPS.length - 1 ? "Done" : "Next";
    card.setAttribute("data-step", String(index + 1));
    var el = highlight();
    if (el && el.scrollIntoView) { el.scrollIntoView({block: "center", behavior: "smooth"}); }
  }

  // Outline the current step's part of the page; called again when a redraw replaced it.
  function highlight() {
    clearHighlight();
    var el = step >= 0 ? targetOf(STEPS[step]) : null;
    if (el) { el.classList.add("pg-tour-target"); }
    return el;
  }

  function finish() {
    remember();
    close();
  }

  // Leaving the page closes the card without remembering: the tour starts again on the next visit.
  function close() {
    clearHighlight();
    if (card && card.parentNode) { card.parentNode.removeChild(card); }
    if (card) { makeRoom(false); }
    card = null;
    step = -1;
  }

  document.addEventListener("click", function (event) {
    var restart = event.target && event.target.closest && event.target.closest("#pg-tour-restart");
    if (restart) { show(0); }
  });

  // Start once per visit when the page's controls are drawn and the tour was never finished or skipped.
  window.setInterval(function () {
    if (!onPlayground()) { if (card) { close(); } return; }
    if (card && !document.querySelector(".pg-tour-target")) { highlight(); }
    if (card || seen() || !document.getElementById("pg-controls")) { return; }
    if (!document.getElementById("pg-result-panel")) { return; }
    show(0);
  }, 400);
})();
