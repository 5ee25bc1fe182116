#!/usr/bin/env bash
# Builds the tests with sanitizers and runs them:
#   asan: AddressSanitizer and UndefinedBehaviorSanitizer over the test suite, MPI tests included
#         (build-asan; the packaging tests, which check install rules and not code, are left out);
#   tsan: ThreadSanitizer over the threads transport's tests (label threads; build-tsan).
#   scripts/run-sanitizers.sh [--ci] [asan|tsan]...       (both when none is named)
# --ci runs the subset CI has time for (measured: 4.7 minutes on 2 AMD EPYC cores, building
# included).
# Any sanitizer report fails the run, also one from a program that a test expects to fail or whose
# output a test swallows: reports go to files (log_path), checked after ctest.
# Needs what scripts/setup.sh installs; the GPU backend and the benchmarks are not built.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ci=0
kinds=()
for arg in "$@"; do
  case $arg in
    --ci) ci=1 ;;
    asan | tsan) kinds+=("$arg") ;;
    *)
      echo "usage: $0 [--ci] [asan|tsan]..." >&2
      exit 2
      ;;
  esac
done
((${#kinds[@]})) || kinds=(asan tsan)

# The CI subset: under asan the values and parsers that hostile input reaches, .npy files, the
# memory pool and the collectives (also under MPI); under tsan the threads transport's own tests
# (rendezvous, sends, failures, halos), tensors and the pool.
ci_asan_tests=(test_core_values test_tensor_layout test_npy test_memory test_collectives)
ci_tsan_tests=(test_collectives test_failures test_halo test_tensor test_memory)

jobs=$(nproc 2>/dev/null || echo 2)
singleton_tests='^unet3d_slurm_sbatch$'

supp=$root/tests/sanitizers
status=0

run_kind() {
  local kind=$1 dir=$root/build-$1 sanitize
  local -a options
  local -a tests ctest_args
  if [ "$kind" = asan ]; then
    sanitize=address,undefined
    options=()
  else
    # Without oneDNN no OpenMP: libgomp's barriers are invisible to ThreadSanitizer (see CMakeLists).
    sanitize=thread
    options=(-DMESHTENSOR_ONEDNN=OFF)
  fi
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMESHTENSOR_SANITIZE=$sanitize \
    -DMESHTENSOR_CUDA=OFF -DMESHTENSOR_BENCH=OFF "${options[@]}" >/dev/null

  if ((ci)); then
    if [ "$kind" = asan ]; then
      tests=("${ci_asan_tests[@]}")
      ctest_args=(-R "^($(IFS='|'; echo "${tests[*]}"))(_mpi_np[0-9]+)?$")  # with their MPI runs
    else
      tests=("${ci_tsan_tests[@]}")
      ctest_args=(-R "^($(IFS='|'; echo "${tests[*]}"))$")
    fi
  elif [ "$kind" = asan ]; then
    tests=()
    ctest_args=(-LE packaging)
  else
    # Every test of the threads transport that runs a test program of its own name (the fuzz
    # corpus replays, single-threaded parsers, are left to asan).
    mapfile -t tests < <(cd "$dir" && ctest -N -L threads | sed -n 's/^ *Test *#[0-9]*: //p' |
      while read -r test; do grep -q "^$test:" Makefile && echo "$test"; done)
    ctest_args=(-R "^($(IFS='|'; echo "${tests[*]}"))$")
  fi
  echo "sanitizers ($kind): building ${tests[*]:-everything}"
  local start=$SECONDS
  if ((${#tests[@]})); then
    # A test's program is also its MPI runs' (under asan, ctest runs those too).
    cmake --build "$dir" --parallel "$jobs" --target "${tests[@]}"
  else
    cmake --build "$dir" --parallel "$jobs"
  fi
  echo "sanitizers ($kind): built in $((SECONDS - start)) s"

  local reports=$dir/sanitizer-reports
  rm -rf "$reports"
  mkdir -p "$reports"
  local common="log_path=$reports/report:print_suppressions=0"
  export ASAN_OPTIONS="$common:check_initialization_order=1:strict_init_order=1"
  export LSAN_OPTIONS="$common:suppressions=$supp/lsan.supp"
  # Open MPI keeps allocations until exit, many in components it has unloaded by then (so no
  # suppression can name them): ranks started by mpirun do not look for leaks. Threads runs do.
  export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0"
  export UBSAN_OPTIONS="$common:print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="$common:suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
  local -a wrapper=()
  # ThreadSanitizer needs a narrow address layout; where the kernel randomises more than it allows
  # ("unexpected memory mapping"), running without address randomisation keeps it working.
  if [ "$kind" = tsan ] && setarch "$(uname -m)" -R true 2>/dev/null; then
    wrapper=(setarch "$(uname -m)" -R)
  fi
  start=$SECONDS
  (cd "$dir" && "${wrapper[@]}" ctest --output-on-failure --parallel "$jobs" "${ctest_args[@]}" \
    -E "$singleton_tests") || status=1
  # The MPI programs these tests start without mpirun (a stand-in srun) are singleton MPI processes,
  # with Open MPI's leaks at exit as above: they too run without leak checks.
  if [ "$kind" = asan ] && ((!ci)) && (cd "$dir" && ctest -N -R "$singleton_tests" | grep -q "Test *#"); then
    (cd "$dir" && ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --output-on-failure \
      -R "$singleton_tests") || status=1
  fi
  echo "sanitizers ($kind): tests ran in $((SECONDS - start)) s"
  if compgen -G "$reports/report.*" >/dev/null; then
    for report in "$reports"/report.*; do
      echo "=== $report"
      cat "$report"
    done
    echo "sanitizers ($kind): the reports above fail this run"
    status=1
  fi
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS OMPI_MCA_mca_base_env_list
}

for kind in "${kinds[@]}"; do run_kind "$kind"; done
exit $status
