#!/usr/bin/env bash
# fp8attn: proves the Python package installs as a user installs it, on any machine with nvcc (no GPU needed):
#   1. a fresh virtual environment (python3 -m venv),
#   2. `pip install .` from this checkout: scikit-build-core builds libfp8attn.so with CMake into the wheel,
#   3. outside the source tree: `import fp8attn`, its version, its compiled kernels, and that the library it
#      loaded is the installed package's own copy (not build/, not FP8ATTN_LIB).
# Not part of scripts/test.sh: the wheel is a second full build of the library (minutes; CI has 90).
# The last run's output is kept in docs/profiles/check_install_cpu.log.
#
#   FP8ATTN_HEAD_DIMS=128 bash scripts/check_install.sh      (default here: 128, the one-head-dim dev build)
#   FP8ATTN_JOBS=N       parallel compile jobs (default: nproc)
#   FP8ATTN_CHECK_DIR=D  where the venv goes (default: a new temporary folder, removed at the end)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FP8ATTN_ROOT"

fp8attn_setup_system build
commit="$(git -C "$FP8ATTN_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
fp8attn_log "checkout $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(nvcc --version | tail -n 1)"
start=$SECONDS
work="${FP8ATTN_CHECK_DIR:-}"
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
venv="$work/venv"
fp8attn_log "fresh venv: $venv ($(python3 --version))"
rm -rf "$venv"
python3 -m venv "$venv"

export FP8ATTN_HEAD_DIMS="${FP8ATTN_HEAD_DIMS:-128}"
export CMAKE_BUILD_PARALLEL_LEVEL="${FP8ATTN_JOBS:-$(nproc)}"
unset FP8ATTN_LIB
fp8attn_log "pip install . (FP8ATTN_HEAD_DIMS=$FP8ATTN_HEAD_DIMS, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install "$FP8ATTN_ROOT" \
  > "$work/pip.log" 2>&1 || { tail -n 60 "$work/pip.log"; fp8attn_die "pip install . failed (log above)"; }
grep -E "^(Successfully|Building wheel|  Created wheel)" "$work/pip.log" || true
fp8attn_log "pip install done in $((SECONDS - start)) s"

cd "$work"  # away from the checkout: only the installed package can be imported
fp8attn_log 'python -c "import fp8attn; print(fp8attn.compiled_kernels())"'
"$venv/bin/python" -c "import fp8attn; print(fp8attn.compiled_kernels())"
"$venv/bin/python" - "$venv" <<'PY'
import sys
from pathlib import Path

import fp8attn

venv = Path(sys.argv[1]).resolve()
package_dir = Path(fp8attn.__file__).resolve().parent
lib = fp8attn.get_lib()
print(f"fp8attn {fp8attn.__version__} from {package_dir}")
print(f"library: {lib.path} (version {lib.version()})")
print(f"supported head dims: {sorted(fp8attn.SUPPORTED_HEAD_SIZES)}")
print("installed package:", ", ".join(f"{p.name} ({p.stat().st_size} B)" for p in sorted(package_dir.iterdir())
                                      if p.is_file()))
assert venv in package_dir.parents, f"fp8attn was imported from {package_dir}, not from the venv {venv}"
assert Path(lib.path).resolve().parent == package_dir, f"loaded {lib.path}, not the package's own copy"
assert lib.version() == fp8attn.__version__, (lib.version(), fp8attn.__version__)
print("check_install: ok")
PY
fp8attn_log "check_install: ok in $((SECONDS - start)) s"
