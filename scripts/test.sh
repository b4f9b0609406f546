#!/usr/bin/env bash
# fp8attn — THE test command (README): bash scripts/test.sh
#
# Sets everything up on a fresh Debian machine (apt: cmake, g++, GoogleTest/GoogleMock, pip, when missing;
# pip: requirements-dev.txt, when pytest/numpy are missing), builds into build/ (Release), then runs
#   1. ctest -L cpu     the C++ CPU tests (host code, CPU reference), one ctest test per gtest case, and the
#                       installed package: its exported symbols, and tests/consumer built against it and run
#   2. ctest -L gpu     the C++ GPU tests: on a machine without an SM90 GPU they are skipped, with their count
#   3. pytest tests/python
# and prints a summary. Exits non-zero if the build or any test failed.
#
#   FP8ATTN_HEAD_DIMS=128 bash scripts/test.sh     dev build: one head dim (see scripts/common.sh for more)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FP8ATTN_ROOT"

total_start=$SECONDS
fp8attn_setup_system tests
fp8attn_setup_python

build_status="ok"
if ! fp8attn_build -DFP8ATTN_BUILD_TESTS=ON; then
  build_status="FAILED"
fi

declare -A counts=() status=() note=()
failed_any=0

# run_ctest NAME LABEL: runs one label's tests, records counts from ctest's JUnit file.
run_ctest() {
  local name="$1" label="$2" rc=0 p f s
  local xml="$FP8ATTN_BUILD_DIR/ctest-$label.xml"
  rm -f "$xml"
  fp8attn_log "ctest -L $label"
  ctest --test-dir "$FP8ATTN_BUILD_DIR" -L "^${label}\$" --output-on-failure --no-tests=error \
        -j "${FP8ATTN_JOBS:-$(nproc)}" --output-junit "$xml" || rc=$?
  counts[$name]="$(fp8attn_junit_counts "$xml")"
  if [ "$rc" -ne 0 ]; then
    status[$name]="FAILED (ctest exit $rc)"
    failed_any=1
    # A crash before any result is still a failure in the counts.
    read -r p f s <<<"${counts[$name]}"
    if [ "$f" -eq 0 ]; then counts[$name]="$p 1 $s"; fi
  else
    status[$name]="ok"
  fi
}

if [ "$build_status" = ok ]; then
  run_ctest "ctest cpu" cpu
  # The installed-package tests run among the CPU tests; name them in the summary.
  note["ctest cpu"]="incl. cpu.install.Exports (exported symbols) and cpu.install.Consumer (find_package)"
  run_ctest "ctest gpu" gpu
  # ctest hides a skipped test's output: show the GPU binary's one-line reason and count.
  gpu_line="$(fp8attn_junit_grep "$FP8ATTN_BUILD_DIR/ctest-gpu.xml" "fp8attn GPU tests:" | head -n 1)"
  if [ -n "$gpu_line" ]; then
    fp8attn_log "$gpu_line"
    note["ctest gpu"]="$gpu_line"
    # Count the skipped GPU tests themselves, not the one ctest entry that stands for them.
    if [[ "$gpu_line" =~ skipped\ ([0-9]+)\ GPU\ tests ]]; then
      counts["ctest gpu"]="0 0 ${BASH_REMATCH[1]}"
    fi
  fi
else
  failed_any=1
fi

# pytest: exit 5 means "no tests collected", which is not a failure; every other non-zero exit is.
py_name="pytest"
if [ "$build_status" != ok ]; then
  :
elif [ ! -d tests/python ]; then
  counts[$py_name]="0 0 0"
  status[$py_name]="ok"
  note[$py_name]="no tests/python directory"
else
  fp8attn_python_env "$FP8ATTN_BUILD_DIR"
  py_xml="$FP8ATTN_BUILD_DIR/pytest.xml"
  rm -f "$py_xml"
  fp8attn_log "python3 -m pytest -q tests/python"
  py_rc=0
  python3 -m pytest -q tests/python --junitxml="$py_xml" || py_rc=$?
  counts[$py_name]="$(fp8attn_junit_counts "$py_xml")"
  case "$py_rc" in
    0) status[$py_name]="ok" ;;
    5) status[$py_name]="ok"; note[$py_name]="pytest collected no tests" ;;
    *) status[$py_name]="FAILED (pytest exit $py_rc)"; failed_any=1
       read -r p f s <<<"${counts[$py_name]}"
       if [ "$f" -eq 0 ]; then counts[$py_name]="$p 1 $s"; fi ;;
  esac
fi

# ---- summary ----------------------------------------------------------------------------------------------
total_p=0 total_f=0 total_s=0
if [ "$build_status" != ok ]; then total_f=1; fi  # the build counts as one failure
echo
echo "==================================== fp8attn test summary ===================================="
printf '%-10s %-34s %s\n' "build" "$build_status" \
  "${FP8ATTN_BUILD_SECONDS} s (FP8ATTN_HEAD_DIMS=${FP8ATTN_HEAD_DIMS:-all}, ${FP8ATTN_BUILD_DIR#"$FP8ATTN_ROOT"/})"
for name in "ctest cpu" "ctest gpu" "$py_name"; do
  if [ -z "${counts[$name]+x}" ]; then
    printf '%-10s %s\n' "$name" "not run (build failed)"
    continue
  fi
  read -r p f s <<<"${counts[$name]}"
  total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
  printf '%-10s %-34s %s\n' "$name" "$p passed, $f failed, $s skipped" "${status[$name]}${note[$name]+ — ${note[$name]}}"
done
printf '%-10s %s\n' "time" "$((SECONDS - total_start)) s in all"
echo "total: $total_p passed, $total_f failed, $total_s skipped"
if [ "$failed_any" -ne 0 ]; then
  exit 1
fi
