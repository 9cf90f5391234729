// Bundles plotly.js core plus the trace modules named on the command line into one minified script
// that sets window.Plotly, with the esbuild settings plotly.js builds its own dist files with.
//   node build.cjs OUTFILE scatter,bar,...
const fs = require('fs');
const { build } = require('esbuild');
const { environmentPlugin } = require('esbuild-plugin-environment');
const { glsl } = require('esbuild-plugin-glsl');
const InlineCSSPlugin = require('esbuild-plugin-inline-css');

const [outfile, traceArg] = process.argv.slice(2);
const traces = traceArg.split(',').filter(Boolean);
const version = require('plotly.js/package.json').version;

// The entry: plotly.js core (which always holds scatter) and each named trace module.
const entry = [
  "'use strict';",
  "var Plotly = require('plotly.js/lib/core');",
  'Plotly.register([',
  ...traces.filter((t) => t !== 'scatter').map((t) => `  require('plotly.js/lib/${t}'),`),
  ']);',
  'module.exports = Plotly;',
].join('\n');

// Attribute metadata (descriptions, human-readable names) is read only by schema tools, never when drawing;
// plotly.js drops it from its own dist files too. Only whole lines in the plain forms are removed.
const META = [
  /\n[ \t]*(?:description|hrName): '(?:[^'\\\n]|\\.)*',?(?=\n)/g,
  /\n[ \t]*description: \[[^\]]*\]\.join\(\s*'[^']*'\s*\),?(?=\n)/g,
  /\n[ \t]*(?:requiredOpts|otherOpts): \[[^\]\n]*\],?(?=\n)/g,
];
const stripMeta = {
  name: 'strip-attribute-meta',
  setup(b) {
    b.onLoad({ filter: /plotly\.js[\\/]src[\\/].*\.js$/ }, (args) => {
      let text = fs.readFileSync(args.path, 'utf8');
      for (const re of META) text = text.replace(re, '');
      return { contents: text, loader: 'js' };
    });
  },
};

// maplibre's stylesheet is required by the registry only when a map trace registers; none does here.
const noMapStyles = {
  name: 'no-map-styles',
  setup(b) {
    b.onResolve({ filter: /maplibre-gl\.css$/ }, () => ({ path: 'maplibre-gl.css', namespace: 'empty' }));
    b.onLoad({ filter: /.*/, namespace: 'empty' }, () => ({ contents: '', loader: 'js' }));
  },
};

const banner = `/**
* plotly.js (whestboard - minified) v${version}
* traces: ${traces.join(', ')}
* Copyright 2012-2026, Plotly, Inc.
* All rights reserved.
* Licensed under the MIT license
*/`;

build({
  stdin: { contents: entry, resolveDir: __dirname, sourcefile: 'index.js', loader: 'js' },
  outfile,
  format: 'iife',
  globalName: 'Plotly',
  bundle: true,
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  plugins: [noMapStyles, InlineCSSPlugin(), glsl({ minify: true }), environmentPlugin({ NODE_DEBUG: false }),
    stripMeta],
  alias: { regl: '@plotly/regl', stream: 'stream-browserify' },
  define: { global: 'window', 'define.amd': 'false' },
  target: 'es2016',
  banner: { js: banner },
  footer: { js: 'window.Plotly = Plotly;' },
  logLevel: 'warning',
}).catch(() => process.exit(1));
