#!/usr/bin/env bash
# Reproduces the FGD paper's experiment grid with Tessera's scheduler and writes
# docs/fgd-reproduction.md: 17 openb traces x every policy and the offline bound x seeds 42-51, our mean
# unallocated GPU % beside the authors' published results at arrived = 100% and 130%.
#
# Usage: bench/fgd_repro.sh [extra `tessera sim repro` options, e.g. --jobs 2 --seeds 42-43]
# Environment:
#   TESSERA_BIN       the tessera binary (default: build/release/tessera, built if missing)
#   TESSERA_DATASETS  the datasets folder (default: ../shared/datasets beside the repository)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bin="${TESSERA_BIN:-$root/build/release/tessera}"
if [[ ! -x "$bin" ]]; then
  echo "fgd_repro: building $bin" >&2
  [[ -f build/release/build.ninja ]] || cmake --preset release >/dev/null
  cmake --build build/release --target tessera -j "$(nproc)"
  bin="$root/build/release/tessera"
fi

datasets="${TESSERA_DATASETS:-$root/../shared/datasets}"
if [[ ! -d "$datasets/openb" || ! -f "$datasets/fgd_expected_results/analysis_allo_discrete.csv" ]]; then
  echo "fgd_repro: $datasets lacks openb/ or fgd_expected_results/; set TESSERA_DATASETS" >&2
  exit 1
fi

mkdir -p docs
start=$(date +%s)
"$bin" sim repro --datasets "$datasets" --out docs/fgd-reproduction.md "$@"
echo "fgd_repro: done in $(( $(date +%s) - start )) s; see docs/fgd-reproduction.md" >&2
