/*
 * dash-ag-grid's main script (1.3 MB, 0.32 MB brotli) only on pages that show a grid.
 *
 * Dash puts a script tag for every component library on every page. app.py turns dash-ag-grid's into
 * an inert tag (type "whestboard/deferred": the browser does not fetch it), keeping the address Dash
 * fingerprinted. Here window.dash_ag_grid is a stand-in whose AgGrid loads that script when the first grid
 * renders, then draws the real component inside it. The stand-in stays the component the renderer sees,
 * so a grid is not mounted twice; the library's other exports are copied onto it once loaded.
 */
(function () {
    var React = window.React;
    var real = null;
    var loading = null;

    function load() {
        if (!loading) {
            loading = new Promise(function (resolve, reject) {
                var inert = document.querySelector('script[data-deferred-library="dash_ag_grid"]');
                if (!inert) {
                    reject(new Error('dash-ag-grid: no deferred script tag on this page'));
                    return;
                }
                var script = document.createElement('script');
                script.src = inert.getAttribute('src');
                script.onload = function () {
                    if (real) resolve(real);
                    else reject(new Error('dash-ag-grid loaded but did not define dash_ag_grid'));
                };
                script.onerror = function () { reject(new Error('dash-ag-grid could not be loaded from ' + script.src)); };
                document.head.appendChild(script);
            });
        }
        return loading;
    }

    var Loaded = React.lazy(function () {
        return load().then(function (ns) { return {default: ns.AgGrid}; });
    });

    function AgGrid(props) {
        return React.createElement(React.Suspense, {fallback: null}, React.createElement(Loaded, props));
    }
    // what the renderer reads from a component's definition before drawing it (as dash-ag-grid sets them)
    AgGrid.dashRenderType = true;
    AgGrid.dashPersistence = {persisted_props: ['selectedRows'], persistence_type: 'local'};
    Object.defineProperty(AgGrid, '_dashprivate_isLazyComponentReady', {
        get: function () {
            return load().then(function (ns) {
                var ready = ns.AgGrid._dashprivate_isLazyComponentReady;
                return ready === undefined ? true : ready;
            });
        },
    });

    var standIn = {
        AgGrid: AgGrid,
        getApiAsync: function (id) { return load().then(function (ns) { return ns.getApiAsync(id); }); },
    };
    Object.defineProperty(window, 'dash_ag_grid', {
        configurable: true,
        get: function () { return standIn; },
        set: function (ns) {
            real = ns;
            Object.keys(ns).forEach(function (key) { if (key !== 'AgGrid') standIn[key] = ns[key]; });
        },
    });
})();
