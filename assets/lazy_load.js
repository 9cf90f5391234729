/*
 * Content below the fold, drawn when it is about to scroll into view. An element carrying
 * data-lazy-store="ID" sets the dcc.Store ID (to the time it came into view) the first time it is within
 * a screen of the viewport; the page's callback listening to that store then draws it. A page opens with
 * what is in view; the leaderboard's timeline (1.3 MB at 500,000 submissions) waits for a scroll.
 */
(function () {
    var seen = new WeakSet();
    var observer = new IntersectionObserver(function (entries) {
        entries.forEach(function (entry) {
            if (!entry.isIntersecting) { return; }
            observer.unobserve(entry.target);
            var store = entry.target.getAttribute('data-lazy-store');
            if (window.dash_clientside && window.dash_clientside.set_props) {
                window.dash_clientside.set_props(store, {data: Date.now()});
            }
        });
    }, {rootMargin: '100% 0px'});

    var pending = false;
    function watch() {  // at most once a frame, however many nodes a render adds
        if (pending) { return; }
        pending = true;
        requestAnimationFrame(function () {
            pending = false;
            document.querySelectorAll('[data-lazy-store]').forEach(function (el) {
                if (!seen.has(el)) { seen.add(el); observer.observe(el); }
            });
        });
    }

    new MutationObserver(watch).observe(document.documentElement, {childList: true, subtree: true});
})();
