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
