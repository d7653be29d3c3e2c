#!/usr/bin/env bash
# Runs every benchmark binary built under $1/bench.
set -euo pipefail
build=${1:-build/release}
found=0
for b in "$build"/bench/*_bench; do
  [ -x "$b" ] || continue
  found=1
  echo "== $(basename "$b")"
  "$b"
done
[ "$found" = 1 ] || echo "no benchmarks built yet"
# The console's figures, in Chromium (needs the console tests' npm packages).
if [ -x "$build/tessera" ] && command -v node >/dev/null; then
  scripts/console-deps.sh
  echo "== console_bench"
  TESSERA_BIN="$build/tessera" node bench/console_bench.mjs
fi
