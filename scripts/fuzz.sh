#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer + UBSan) in build-fuzz/
# and runs each for SECONDS (default 60) over a copy of its seed corpus. New inputs go to a
# scratch directory; --save merges those that reach new code into tests/fuzz/corpus/. Fails when
# any target crashes, leaks, hangs, asks for too much memory or breaks an invariant; the input
# that did it is kept and named. Prints each target's runs and time.
#
#   scripts/fuzz.sh [SECONDS] [--save]        CI: scripts/fuzz.sh 30
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
save=0
for arg in "$@"; do
  case "$arg" in
    --save) save=1 ;;
    ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [--save]" >&2; exit 2 ;;
    *) seconds=$arg ;;
  esac
done
build=${MESHTENSOR_FUZZ_BUILD:-build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)

start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHTENSOR_FUZZ=ON -DMESHTENSOR_TESTS=OFF -DMESHTENSOR_EXAMPLES=OFF -DMESHTENSOR_BENCH=OFF \
  -DMESHTENSOR_INSTALL=OFF -DMESHTENSOR_MPI=OFF -DMESHTENSOR_ONEDNN=OFF -DMESHTENSOR_CUDA=OFF >/dev/null
cmake --build "$build" --parallel "$jobs" >/dev/null
echo "fuzz: built in $(( $(date +%s) - start )) s"

# The largest input each target is given: a header and a few voxels, a manifest, a flag's text.
declare -A max_len=([npy]=4096 [nifti]=8192 [manifest]=4096 [strings]=512)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/meshtensor-fuzz.XXXXXX")
# The targets write each input to a file: in memory (/dev/shm) where there is one. libFuzzer ends
# without running exit handlers, so this script removes what they leave.
inputs=$(mktemp -d /dev/shm/meshtensor-fuzz-inputs.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$inputs"' EXIT
# fuzz_target TARGET: runs one target over a copy of its seeds; its exit status in $work/status.
fuzz_target() {
  local target=$1 binary="$build/tests/fuzz/fuzz_$1" work="$scratch/$1" status=0
  mkdir -p "$work/new"
  cp -r "tests/fuzz/corpus/$target" "$work/seeds"
  # One input may take at most 10 s and 2 GiB (one allocation 1 GiB): more is a bug to report.
  TMPDIR="$inputs" "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len="${max_len[$target]}" -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/new" "$work/seeds" >"$work/log" 2>&1 || status=$?
  echo "$status" >"$work/status"
}

# The targets run side by side, one per core: each is single-threaded.
targets=()
for target in strings npy nifti manifest; do
  if [ -x "$build/tests/fuzz/fuzz_$target" ]; then
    targets+=("$target")
  else
    echo "fuzz: $target not built here (a library is missing); skipped"
  fi
done
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  fuzz_target "$target" &
done
wait

failed=()
for target in "${targets[@]}"; do
  work="$scratch/$target"
  status=$(cat "$work/status")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  new=$(find "$work/new" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    seed=$(sed -n '/^INFO: Seed: */{s///p;q}' "$work/log" || true)
    echo "fuzz: $target FAILED (status $status) after ${runs:-?} runs (libFuzzer -seed=${seed:-?});" \
      "its input and log:"
    ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null || true
    # nifticlib prints "** ERROR" for every header it refuses: noise, not the failure. The first
    # 40 lines are read whole (no pipe for head to close early under pipefail).
    grep -v -e '^"' -e '^\*\* ERROR' -e '^+d ' -e '^\*\* nim' "$work/log" |
      grep -E 'ERROR|SUMMARY|invariant|runtime error|#[0-9]+ 0x' >"$work/summary" || true
    sed -n 1,40p "$work/summary"
    # The input itself (at most max_len bytes), so that a run on another machine can be replayed
    # here: base64 -d > input, then build-fuzz/tests/fuzz/fuzz_TARGET input.
    for input in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [ -f "$input" ] || continue
      echo "  $(basename "$input") in base64:"
      base64 -w 100 "$input" | sed 's/^/    /'
    done
    echo "  full log: $work/log"
    continue
  fi
  echo "fuzz: $target: ${runs:-?} runs in $seconds s (${rate:-?}/s), $new new inputs (--save keeps them)"
  if [ "$save" = 1 ] && [ "$new" -gt 0 ]; then
    binary="$build/tests/fuzz/fuzz_$target"
    TMPDIR="$inputs" "$binary" -merge=1 -max_len="${max_len[$target]}" "tests/fuzz/corpus/$target" \
      "$work/new" >"$work/merge.log" 2>&1
    echo "  merged the inputs that reach new code into tests/fuzz/corpus/$target"
  fi
done
echo "fuzz: all targets in $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs and logs under $scratch)"
  exit 1
fi
rm -rf "$scratch"
