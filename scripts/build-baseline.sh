#!/usr/bin/env bash
# Builds the `tessera` binary of an earlier commit into build/baseline, for benchmarks that compare
# today's server with an earlier one side by side: TESSERA_BASELINE_BIN=build/baseline/tessera
# make bench. Usage: scripts/build-baseline.sh REV (e.g. 5004b75).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/build-baseline.sh REV}
src=build/baseline-src
if [ -d "$src" ]; then
  git worktree remove --force "$src"
fi
git worktree add --detach "$src" "$rev" >/dev/null
cmake -S "$src" -B build/baseline -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCH=OFF >/dev/null
cmake --build build/baseline --target tessera
echo "baseline: build/baseline/tessera ($(git rev-parse --short "$rev"))"
