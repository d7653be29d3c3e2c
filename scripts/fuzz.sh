#!/usr/bin/env bash
# Builds the libFuzzer targets (the clang `fuzz` preset, in build/fuzz) and runs each for a while on
# a scratch copy of its seed corpus, so the repository's corpus only grows when asked to.
#
#   scripts/fuzz.sh [TARGET...]        every target in fuzz/CMakeLists.txt when none is named
#
# Environment:
#   FUZZ_SECONDS  seconds per target (default 60)
#   FUZZ_MERGE    1: merge the inputs that found new coverage back into fuzz/corpus/<target>/
#   FUZZ_JOBS     parallel compile jobs (default: nproc)
#   FUZZ_NICE     niceness of the fuzzers (default 19); they run one at a time
#
# Exits 1 after the last target when any target crashed, timed out or ran out of memory, naming
# each target and the input that did it (kept under build/fuzz/artifacts/<target>/). To keep such
# an input as a regression test, copy it to fuzz/regressions/<target>/ once the bug is fixed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build=build/fuzz
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-$(nproc)}"
niceness="${FUZZ_NICE:-19}"

# Longest input per target: the seeds must fit (catalog's seed is the whole catalog), and longer
# inputs only slow the search.
max_len() {
  case "$1" in
    catalog) echo 65536 ;;
    fgd_expected) echo 16384 ;;
    fleet_json | json_fields) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

scripts/bootstrap.sh
test -f "$build/build.ninja" || cmake --preset fuzz >/dev/null
cmake --build "$build" --target fuzzers -j "$jobs"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^tessera_fuzz_target(\([a-z_]*\) .*/\1/p' fuzz/CMakeLists.txt)
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
  bin="$build/fuzz/${t}_fuzz"
  if [ ! -x "$bin" ]; then
    echo "fuzz: no target '$t' (built: $(ls "$build/fuzz" | sed -n 's/_fuzz$//p' | tr '\n' ' '))" >&2
    exit 2
  fi
  corpus="$scratch/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  cp -r fuzz/corpus/"$t"/. "$corpus"/
  if [ -d fuzz/regressions/"$t" ]; then cp -r fuzz/regressions/"$t"/. "$corpus"/; fi
  before="$(ls "$artifacts")"
  echo "fuzz: $t for ${seconds}s"
  dict=()
  if [ -f fuzz/dicts/"$t".dict ]; then dict=(-dict=fuzz/dicts/"$t".dict); fi
  status=0
  nice -n "$niceness" "$bin" "$corpus" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "${dict[@]}" >"$scratch/$t.log" 2>&1 || status=$?
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$scratch/$t.log" |
    sed 's/^/  /' || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$scratch/$t.log" >&2
    input="$(comm -13 <(echo "$before") <(ls "$artifacts") | head -n 1 || true)"
    echo "fuzz: $t FAILED (exit $status); input: $artifacts/${input:-?}" >&2
    failed+=("$t: $artifacts/${input:-?}")
    continue
  fi
  if [ "${FUZZ_MERGE:-0}" = 1 ]; then
    nice -n "$niceness" "$bin" -merge=1 -max_len="$(max_len "$t")" fuzz/corpus/"$t" "$corpus" \
      >"$scratch/$t.merge.log" 2>&1
    echo "  merged into fuzz/corpus/$t: $(grep -o '[0-9]* new files' "$scratch/$t.merge.log" ||
      echo 'nothing new')"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran ${seconds}s each without a crash"
