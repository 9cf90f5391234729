/*
 * Which plotly.js dcc.Graph loads. A graph draws with window.Plotly when that exists; otherwise it
 * appends a script whose address it reads from window._dashPlotlyJSURL, which the Dash renderer sets to
 * plotly.py's full plotly.min.js (4.8 MB, 1.27 MB brotli). Here that address is fixed to the app's own
 * bundle, plotly-whestboard.min.js: the same plotly.js version, only the trace types the app draws
 * (scripts/build_plotly_bundle.sh). It is left out of the page's script tags (app.py: assets_ignore),
 * so a page without a graph loads no plotly.js at all and the first graph loads it once.
 * The version below is the bundle's sha256 (written by the build script): a new bundle is a new address,
 * so the browser may keep each one for a year.
 */
(function () {
    var version = 'd6ffca66c8fb';
    var here = (document.currentScript && document.currentScript.src) || '';
    var url = here.replace(/[^/]*$/, '') + 'plotly-whestboard.min.js?v=' + version;
    Object.defineProperty(window, '_dashPlotlyJSURL', {
        configurable: true,
        get: function () { return url; },
        set: function () { /* the renderer's own address is ignored */ },
    });
})();
