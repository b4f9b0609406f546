#!/usr/bin/env bash
# fp8attn: the whole GPU suite on a Hopper (SM90) GPU, from an ALREADY BUILT build directory.
#
#   bash scripts/gpu_suite.sh [BUILD_DIR]        (default: build/)
#
# The build is made elsewhere (e.g. `bash scripts/test.sh` on a CPU machine) and the build directory carried
# here; nothing is configured, built or installed. Runs, in order:
#   1. BUILD_DIR/tests/fp8attn_gpu_tests --gtest_brief=1, then any further BUILD_DIR/tests/fp8attn_gpu_*
#      test binaries; with FP8ATTN_REQUIRE_GPU=1, so a missing GPU is a failure here, not a skip;
#   2. with FP8ATTN_SANITIZE=1: compute-sanitizer memcheck, racecheck and synccheck over the GPU tests that
#      FP8ATTN_SANITIZE_FILTER selects (a gtest filter, default '*EdgeCases*:*BadArgument*:Splits.*': the edge-case,
#      bad-argument and split tests; it must select at least one);
#   3. with FP8ATTN_SANITIZE_FUZZ=1: compute-sanitizer memcheck, racecheck, synccheck and initcheck over
#      FP8ATTN_SANITIZE_FUZZ_COUNT fuzz configurations (default 50; seed FP8ATTN_FUZZ_SEED, default: one per
#      run, printed), the Empty.* tests and KernelVariants.* (every compiled kernel once); then memcheck over
#      the Python tests FP8ATTN_SANITIZE_PYTEST selects (a pytest -k expression) with
#      PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that a read past a tensor is seen. The sanitizer output also goes
#      to ${OUT:-/tmp}/sanitize_fuzz.log;
#   4. python3 -m pytest -q tests/python, if torch imports (FP8ATTN_LIB points at BUILD_DIR/libfp8attn.so).
# FP8ATTN_SUITE_TESTS=0 leaves out steps 1 and 4 (the sanitizer passes alone, for a build whose suite has run).
# The full output goes to ${OUT:-/tmp}/gpu_tests.log (gtest XML files beside it); a summary table (suite,
# passed, failed, skipped, seconds) is printed last. Exits non-zero if anything failed.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FP8ATTN_ROOT"

BUILD="${1:-$FP8ATTN_ROOT/build}"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_tests.log"
: >"$LOG"
export FP8ATTN_REQUIRE_GPU=1
export LD_LIBRARY_PATH="$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

rows=()
any_failed=0
add_row() {  # suite passed failed skipped seconds [note]
  rows+=("$1|$2|$3|$4|$5|${6:-}")
}

# run_suite NAME XML COMMAND...: runs COMMAND --gtest_output=xml:XML, output to the console and the log.
run_suite() {
  local name="$1" xml="$2" rc=0 start=$SECONDS p f s note=""
  shift 2
  rm -f "$xml"
  printf '\n===== %s: %s\n' "$name" "$*" | tee -a "$LOG"
  set +e
  "$@" --gtest_output="xml:$xml" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  set -e
  read -r p f s <<<"$(fp8attn_junit_counts "$xml")"
  if [ "$rc" -ne 0 ]; then
    any_failed=1
    note="exit $rc"
    if [ "$f" -eq 0 ]; then f=1; fi  # crashed, or failed outside any test
  fi
  add_row "$name" "$p" "$f" "$s" "$((SECONDS - start))" "$note"
}

# ---- 1. GPU test binaries ---------------------------------------------------------------------------------
main_bin="$BUILD/tests/fp8attn_gpu_tests"
run_tests="${FP8ATTN_SUITE_TESTS:-1}"
if [ "$run_tests" = 0 ]; then
  echo "gpu_suite: FP8ATTN_SUITE_TESTS=0: the test binaries and pytest are not run" | tee -a "$LOG"
elif [ -x "$main_bin" ]; then
  run_suite "gpu tests" "$OUTDIR/gpu_tests.xml" "$main_bin" --gtest_brief=1
else
  echo "gpu_suite: $main_bin not found: build with tests first (bash scripts/test.sh)" | tee -a "$LOG"
  add_row "gpu tests" 0 1 0 0 "binary missing"
  any_failed=1
fi
for bin in "$BUILD"/tests/fp8attn_gpu_*; do
  if [ "$run_tests" = 0 ] || [ ! -f "$bin" ] || [ ! -x "$bin" ] || [ "$bin" = "$main_bin" ]; then continue; fi
  stem="$(basename "$bin")"
  run_suite "$stem" "$OUTDIR/$stem.xml" "$bin" --gtest_brief=1
done

# ---- 2. compute-sanitizer ---------------------------------------------------------------------------------
if [ "${FP8ATTN_SANITIZE:-0}" = 1 ] && [ -x "$main_bin" ]; then
  filter="${FP8ATTN_SANITIZE_FILTER:-*EdgeCases*:*BadArgument*:Splits.*}"
  sanitizer="$(command -v compute-sanitizer || true)"
  if [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    sanitizer=/usr/local/cuda/bin/compute-sanitizer
  fi
  selected="$("$main_bin" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ' || true)"
  if [ -z "$sanitizer" ]; then
    echo "gpu_suite: compute-sanitizer not found" | tee -a "$LOG"
    add_row "sanitize" 0 1 0 0 "compute-sanitizer not found"
    any_failed=1
  elif [ "$selected" -eq 0 ]; then
    echo "gpu_suite: FP8ATTN_SANITIZE_FILTER='$filter' selects no GPU test" | tee -a "$LOG"
    add_row "sanitize" 0 1 0 0 "filter '$filter' selects no test"
    any_failed=1
  else
    for tool in memcheck racecheck synccheck; do
      run_suite "sanitize $tool" "$OUTDIR/sanitize_$tool.xml" \
        "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 \
        "$main_bin" --gtest_brief=1 --gtest_filter="$filter"
    done
  fi
fi

# ---- 3. compute-sanitizer over the fuzz ----------------------------------------------------------------------
find_sanitizer() {
  local found
  found="$(command -v compute-sanitizer || true)"
  if [ -z "$found" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then found=/usr/local/cuda/bin/compute-sanitizer; fi
  echo "$found"
}
if [ "${FP8ATTN_SANITIZE_FUZZ:-0}" = 1 ] && [ -x "$main_bin" ]; then
  sanitizer="$(find_sanitizer)"
  fuzz_log="$OUTDIR/sanitize_fuzz.log"
  : >"$fuzz_log"
  export FP8ATTN_FUZZ_COUNT="${FP8ATTN_SANITIZE_FUZZ_COUNT:-50}"
  export FP8ATTN_FUZZ_SEED="${FP8ATTN_FUZZ_SEED:-$(( $(date +%s) % 1000000007 ))}"
  echo "gpu_suite: sanitizing $FP8ATTN_FUZZ_COUNT fuzz configurations of seed $FP8ATTN_FUZZ_SEED" | tee -a "$LOG" "$fuzz_log"
  if [ -z "$sanitizer" ]; then
    echo "gpu_suite: compute-sanitizer not found" | tee -a "$LOG" "$fuzz_log"
    add_row "sanitize fuzz" 0 1 0 0 "compute-sanitizer not found"
    any_failed=1
  else
    for tool in memcheck racecheck synccheck initcheck; do
      lines_before=$(wc -l <"$LOG")
      run_suite "sanitize fuzz $tool" "$OUTDIR/sanitize_fuzz_$tool.xml" \
        "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 20 \
        "$main_bin" --gtest_brief=0 --gtest_filter='Fuzz.*:Empty.*:KernelVariants.*'
      tail -n +"$((lines_before + 1))" "$LOG" >>"$fuzz_log"
    done
    if python3 -c 'import torch' >/dev/null 2>&1; then
      fp8attn_python_env "$BUILD"
      expr="${FP8ATTN_SANITIZE_PYTEST:-all_key_lengths_zero or no_query_rows or two_streams or splits_graph_bound or flash_attn_with_kvcache or varlen_prefill}"
      start=$SECONDS
      printf '\n===== sanitize pytest memcheck: -k "%s"\n' "$expr" | tee -a "$LOG" "$fuzz_log"
      set +e
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 FP8ATTN_LIB="$BUILD/libfp8attn.so" \
        "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 \
        python3 -m pytest -q tests/python -k "$expr" --junitxml="$OUTDIR/sanitize_pytest.xml" 2>&1 | tee -a "$LOG" "$fuzz_log"
      py_rc=${PIPESTATUS[0]}
      set -e
      read -r p f s <<<"$(fp8attn_junit_counts "$OUTDIR/sanitize_pytest.xml")"
      note=""
      if [ "$py_rc" -ne 0 ]; then note="exit $py_rc"; any_failed=1; if [ "$f" -eq 0 ]; then f=1; fi; fi
      add_row "sanitize pytest memcheck" "$p" "$f" "$s" "$((SECONDS - start))" "$note"
    else
      add_row "sanitize pytest memcheck" - - - 0 "torch not importable: not run"
    fi
  fi
fi

# ---- 4. Python tests --------------------------------------------------------------------------------------
if [ "$run_tests" = 0 ]; then
  :
elif [ ! -d tests/python ]; then
  add_row "pytest" - - - 0 "no tests/python"
elif python3 -c 'import torch' >/dev/null 2>&1; then
  fp8attn_python_env "$BUILD"
  export FP8ATTN_LIB="$BUILD/libfp8attn.so"
  py_xml="$OUTDIR/pytest.xml"
  rm -f "$py_xml"
  start=$SECONDS
  printf '\n===== pytest: python3 -m pytest -q tests/python\n' | tee -a "$LOG"
  set +e
  python3 -m pytest -q tests/python --junitxml="$py_xml" 2>&1 | tee -a "$LOG"
  py_rc=${PIPESTATUS[0]}
  set -e
  read -r p f s <<<"$(fp8attn_junit_counts "$py_xml")"
  note=""
  case "$py_rc" in
    0) ;;
    5) note="no tests collected" ;;
    *) note="exit $py_rc"; any_failed=1; if [ "$f" -eq 0 ]; then f=1; fi ;;
  esac
  add_row "pytest" "$p" "$f" "$s" "$((SECONDS - start))" "$note"
else
  add_row "pytest" - - - 0 "torch not importable: not run"
fi

# ---- summary (last) ---------------------------------------------------------------------------------------
{
  echo
  echo "fp8attn GPU suite ($BUILD; log: $LOG)"
  printf '%-26s %7s %7s %8s %8s  %s\n' suite passed failed skipped seconds note
  tp=0 tf=0 ts=0 tt=0
  for row in "${rows[@]}"; do
    IFS='|' read -r name p f s secs note <<<"$row"
    printf '%-26s %7s %7s %8s %8s  %s\n' "$name" "$p" "$f" "$s" "$secs" "$note"
    if [[ "$p" =~ ^[0-9]+$ ]]; then tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s)); fi
    tt=$((tt + secs))
  done
  printf '%-26s %7s %7s %8s %8s  %s\n' total "$tp" "$tf" "$ts" "$tt" "$([ "$any_failed" -eq 0 ] && echo ok || echo FAILED)"
} | tee -a "$LOG"
exit "$any_failed"
