# shellcheck shell=bash
# fp8attn: set-up and build steps shared by scripts/test.sh, scripts/run.sh and scripts/gpu_suite.sh.
# Sourced, not run: it only defines variables and functions.
#
# Environment:
#   FP8ATTN_HEAD_DIMS   head dims to compile: "all" (default) or e.g. "128" or "128;192x128" (commas work too)
#   FP8ATTN_BUILD_DIR   build directory (default: <repo>/build)
#   FP8ATTN_JOBS        parallel compile jobs (default: nproc)
#   FP8ATTN_NO_INSTALL  1: never call apt-get / pip; fail if something is missing

FP8ATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FP8ATTN_BUILD_DIR="${FP8ATTN_BUILD_DIR:-$FP8ATTN_ROOT/build}"
case "$FP8ATTN_BUILD_DIR" in /*) ;; *) FP8ATTN_BUILD_DIR="$PWD/$FP8ATTN_BUILD_DIR" ;; esac
FP8ATTN_BUILD_SECONDS=0

fp8attn_log() { printf '[fp8attn] %s\n' "$*"; }
fp8attn_die() { printf '[fp8attn] ERROR: %s\n' "$*" >&2; exit 1; }

_fp8attn_apt_updated=0
# apt-get install the given Debian packages (runs `apt-get update` once first).
fp8attn_apt_install() {
  [ "$#" -gt 0 ] || return 0
  if [ "${FP8ATTN_NO_INSTALL:-0}" = 1 ]; then
    fp8attn_die "missing: $* (FP8ATTN_NO_INSTALL=1, so not installing them)"
  fi
  command -v apt-get >/dev/null 2>&1 || fp8attn_die "missing: $*; no apt-get here to install them"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || fp8attn_die "missing: $*; installing them needs root (or sudo)"
    sudo=(sudo)
  fi
  if [ "$_fp8attn_apt_updated" = 0 ]; then
    fp8attn_log "apt-get update"
    "${sudo[@]}" apt-get update -qq || fp8attn_die "apt-get update failed"
    _fp8attn_apt_updated=1
  fi
  fp8attn_log "apt-get install $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    || fp8attn_die "apt-get install $* failed"
}

# Makes sure the build tools are there: nvcc, cmake, g++, python3; with argument "tests" also GoogleTest,
# GoogleMock and pip ("build": the build tools only).
fp8attn_setup_system() {
  local want_tests="${1:-}"
  local missing=()
  if ! command -v nvcc >/dev/null 2>&1; then
    if [ -x /usr/local/cuda/bin/nvcc ]; then
      export PATH="/usr/local/cuda/bin:$PATH"
    else
      fp8attn_die "nvcc (the CUDA toolkit) is not on PATH nor in /usr/local/cuda/bin"
    fi
  fi
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  if [ "$want_tests" = tests ]; then
    [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
    [ -f /usr/include/gmock/gmock.h ] || missing+=(libgmock-dev)
    if ! python3 -m pip --version >/dev/null 2>&1; then
      # python3 may be a pyenv/venv interpreter that Debian's python3-pip does not serve: try ensurepip.
      python3 -m ensurepip --upgrade >/dev/null 2>&1 || missing+=(python3-pip)
    fi
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    fp8attn_apt_install "${missing[@]}"
  else
    local extra=""
    if [ "$want_tests" = tests ]; then extra=", gtest, gmock, pip"; fi
    fp8attn_log "system packages present (nvcc, cmake, g++, python3$extra)"
  fi
  if [ "$want_tests" = tests ] && ! python3 -m pip --version >/dev/null 2>&1; then
    fp8attn_die "python3 -m pip does not work for $(command -v python3)"
  fi
}

# pip-installs requirements-dev.txt unless pytest and numpy already import (the GPU machine has no network).
fp8attn_setup_python() {
  if python3 -c 'import pytest, numpy' >/dev/null 2>&1; then
    fp8attn_log "python: pytest $(python3 -c 'import pytest; print(pytest.__version__)'), numpy" \
                "$(python3 -c 'import numpy; print(numpy.__version__)') already installed"
    return 0
  fi
  if [ "${FP8ATTN_NO_INSTALL:-0}" = 1 ]; then fp8attn_die "pytest/numpy missing (FP8ATTN_NO_INSTALL=1)"; fi
  fp8attn_log "pip install -r requirements-dev.txt"
  # PIP_BREAK_SYSTEM_PACKAGES: Debian's own python3 refuses pip installs otherwise (PEP 668); we are root on a
  # throw-away machine, which is what that guard is not for.
  PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    python3 -m pip install --quiet -r "$FP8ATTN_ROOT/requirements-dev.txt" \
    || fp8attn_die "pip install -r requirements-dev.txt failed"
}

# Configures and builds into $FP8ATTN_BUILD_DIR (Release). Extra arguments go to the cmake configure step.
# Sets FP8ATTN_BUILD_SECONDS. Returns non-zero on failure (callers decide what to do).
fp8attn_build() {
  local head_dims="${FP8ATTN_HEAD_DIMS:-all}"
  head_dims="${head_dims//,/;}"
  head_dims="${head_dims// /;}"
  while [[ "$head_dims" == *";;"* ]]; do head_dims="${head_dims//;;/;}"; done
  head_dims="${head_dims#;}"
  head_dims="${head_dims%;}"
  local jobs="${FP8ATTN_JOBS:-$(nproc)}"
  local generator=()
  if [ ! -f "$FP8ATTN_BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  # The POST_BUILD checks need cuobjdump and nvdisasm (the SASS check); find (or pip-install) them now so that
  # a missing one shows before the long kernel build, not after it.
  local no_install=()
  if [ "${FP8ATTN_NO_INSTALL:-0}" = 1 ]; then no_install=(--no-install); fi
  if ! FP8ATTN_CUOBJDUMP="$(python3 "$FP8ATTN_ROOT/scripts/check_resources.py" --find cuobjdump "${no_install[@]}")" \
     || ! FP8ATTN_NVDISASM="$(python3 "$FP8ATTN_ROOT/scripts/check_resources.py" --find nvdisasm "${no_install[@]}")"; then
    fp8attn_log "ERROR: no cuobjdump / nvdisasm for the kernel checks (see above)"
    return 1
  fi
  export FP8ATTN_CUOBJDUMP FP8ATTN_NVDISASM
  local start=$SECONDS
  fp8attn_log "configure: $FP8ATTN_BUILD_DIR (Release, FP8ATTN_HEAD_DIMS=$head_dims)"
  cmake -S "$FP8ATTN_ROOT" -B "$FP8ATTN_BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        "-DFP8ATTN_HEAD_DIMS=$head_dims" "$@" || return 1
  fp8attn_log "build: cmake --build (-j $jobs)"
  cmake --build "$FP8ATTN_BUILD_DIR" -j "$jobs" || { FP8ATTN_BUILD_SECONDS=$((SECONDS - start)); return 1; }
  FP8ATTN_BUILD_SECONDS=$((SECONDS - start))
  fp8attn_log "build done in ${FP8ATTN_BUILD_SECONDS} s"
}

# Environment for the Python package and its tests: the in-tree package and the library just built.
fp8attn_python_env() {
  local build_dir="${1:-$FP8ATTN_BUILD_DIR}"
  export PYTHONPATH="$FP8ATTN_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
  if [ -f "$build_dir/libfp8attn.so" ] && [ "$build_dir" != "$FP8ATTN_ROOT/build" ]; then
    export FP8ATTN_LIB="$build_dir/libfp8attn.so"  # the package finds <repo>/build/libfp8attn.so by itself
  fi
}

# True when nvidia-smi works and lists at least one GPU.
fp8attn_have_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# Counts of a JUnit-style XML file (ctest --output-junit, gtest --gtest_output=xml, pytest --junitxml):
# prints "passed failed skipped"; "0 0 0" when the file is missing or unreadable.
fp8attn_junit_counts() {
  python3 - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0 0 0")
    sys.exit(0)
passed = failed = skipped = 0
for case in root.iter("testcase"):
    tags = {child.tag for child in case}
    if tags & {"failure", "error"}:
        failed += 1
    elif "skipped" in tags or case.get("status") in ("notrun", "disabled") or case.get("result") in ("skipped", "suppressed"):
        skipped += 1
    else:
        passed += 1
print(passed, failed, skipped)
PY
}

# Lines of a JUnit XML's captured output (system-out) that contain a fixed string.
fp8attn_junit_grep() {
  python3 - "$1" "$2" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    sys.exit(0)
for node in root.iter("system-out"):
    for line in (node.text or "").splitlines():
        if sys.argv[2] in line:
            print(line)
PY
}
