#!/usr/bin/env bash
# Rebuilds assets/plotly-whestboard.min.js: plotly.js of the version the pinned plotly.py ships, with only
# the trace types the app draws (tests/components/test_plotly_bundle.py fails when a figure uses another).
#
#   ./scripts/build_plotly_bundle.sh          build, install into assets/, record the sha256
#   ./scripts/build_plotly_bundle.sh --check  build in a scratch folder and compare with the committed file
#
# Needs node and npm (the npm registry); builds outside the repository, in a temporary folder. The exact
# dependency tree is scripts/plotly_bundle/package-lock.json, so a rebuild gives the same bytes.
set -euo pipefail

TRACES="scatter,scattergl,bar,box,heatmap"

repo="$(cd "$(dirname "$0")/.." && pwd)"
here="$repo/scripts/plotly_bundle"
target="$repo/assets/plotly-whestboard.min.js"  # loaded by assets/plotly_loader.js
python="$repo/.venv/bin/python"
[ -x "$python" ] || python=python3

# The version plotly.py ships (the header of its plotly.min.js) must be the one we build.
shipped="$("$python" -c 'import plotly.offline as o; print(o.get_plotlyjs_version())')"
pinned="$(node -p "require('$here/package.json').dependencies['plotly.js']")"
if [ "$shipped" != "$pinned" ]; then
    echo "plotly.py ships plotly.js $shipped but $here/package.json pins $pinned: update the pin and the lock" >&2
    exit 1
fi

work="$(mktemp -d /tmp/whestboard-plotly-bundle.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$here/build.cjs" "$work/"
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
(cd "$work" && node build.cjs "$work/out.min.js" "$TRACES")
sum="$(sha256sum "$work/out.min.js" | cut -d' ' -f1)"

if [ "${1:-}" = "--check" ]; then
    committed="$(sha256sum "$target" | cut -d' ' -f1)"
    if [ "$sum" = "$committed" ]; then
        echo "rebuilt bundle is identical to $target ($sum)"
    else
        echo "rebuilt bundle $sum differs from $target $committed" >&2
        exit 1
    fi
    exit 0
fi

cp "$work/out.min.js" "$target"
echo "$sum  assets/plotly-whestboard.min.js" > "$here/bundle.sha256"
# the loader's address carries the bundle's version, so a browser never keeps a stale bundle
sed -i "s/var version = '[0-9a-f]*';/var version = '${sum:0:12}';/" "$repo/assets/plotly_loader.js"
"$python" - "$target" <<'PY'
import sys, gzip
data = open(sys.argv[1], "rb").read()
line = f"{sys.argv[1]}: {len(data):,} bytes, gzip-6 {len(gzip.compress(data, 6)):,}"
try:
    import brotli
    line += f", brotli-6 {len(brotli.compress(data, quality=6)):,}"
except ImportError:
    pass
print(line)
PY
echo "sha256 $sum (scripts/plotly_bundle/bundle.sha256)"
