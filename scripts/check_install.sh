#!/usr/bin/env bash
# fp8attn: proves the Python package installs as a user installs it, on any machine with nvcc (no GPU needed),
# from a CLEAN CLONE of this checkout's HEAD (no .deps/, no build/: only what a user who clones the repository,
# or downloads its sdist, has):
#   1. `pip install .` in a fresh virtual environment: scikit-build-core builds libfp8attn.so with CMake into
#      the wheel, with the CUTLASS headers (and cuobjdump/nvdisasm for the kernel checks) from pip's isolated
#      build environment (pyproject.toml's build requirements), never from .deps/;
#   2. outside the source tree: `import fp8attn`, its version, its compiled kernels, and that the library it
#      loaded is the installed package's own copy (not build/, not FP8ATTN_LIB); the torch op's source ships
#      with it (fp8attn/_torch_op/, compiled on first import where torch >= 2.9 is installed later);
#   3. `pip wheel .`: a wheel holding libfp8attn.so;
#   4. `python -m build --sdist`, then `pip install` of that sdist into a second fresh venv, and step 2 again.
# Uncommitted changes are not in the clone: commit first (the script says when the checkout has some).
# Not part of scripts/test.sh: three builds of the library (minutes; CI has 90).
# README.md's Install section quotes the last run's timings.
#
#   FP8ATTN_HEAD_DIMS=128 bash scripts/check_install.sh      (default here: 128, the one-head-dim dev build)
#   FP8ATTN_JOBS=N       parallel compile jobs (default: nproc)
#   FP8ATTN_CHECK_DIR=D  where the clone, the venvs and the wheels go (default: a new temporary folder,
#                        removed at the end)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FP8ATTN_ROOT"

fp8attn_setup_system build
commit="$(git -C "$FP8ATTN_ROOT" rev-parse --short HEAD)"
fp8attn_log "checkout $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(nvcc --version | tail -n 1)"
if [ -n "$(git -C "$FP8ATTN_ROOT" status --porcelain --untracked-files=no)" ]; then
  fp8attn_log "note: the checkout has uncommitted changes; they are not in the clone of $commit checked here"
fi
start=$SECONDS
work="${FP8ATTN_CHECK_DIR:-}"
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
export FP8ATTN_HEAD_DIMS="${FP8ATTN_HEAD_DIMS:-128}"
export CMAKE_BUILD_PARALLEL_LEVEL="${FP8ATTN_JOBS:-$(nproc)}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset FP8ATTN_LIB FP8ATTN_CUTLASS_DIR

src="$work/src"
rm -rf "$src"
git clone --quiet "$FP8ATTN_ROOT" "$src"
if [ -e "$src/.deps" ] || [ -e "$src/build" ]; then fp8attn_die "the clone has .deps/ or build/"; fi
fp8attn_log "clean clone of $commit: $src (no .deps/, no build/)"

# Runs a pip command with its log in $work/$1.log; prints the build's fp8attn lines (where CUTLASS came from,
# whether the torch op was built) and pip's result lines; dies with the log's tail on failure.
pip_logged() {
  local name="$1"
  shift
  local t0=$SECONDS
  "$@" -v > "$work/$name.log" 2>&1 || { tail -n 60 "$work/$name.log"; fp8attn_die "$name failed (log above)"; }
  grep -oE "fp8attn: (CUTLASS|not building|building libfp8attn_torch).*" "$work/$name.log" | sed 's/^/   /' || true
  grep -E "^(Successfully|  Created wheel)" "$work/$name.log" | cut -c1-160 || true
  grep -q "fp8attn: CUTLASS headers at .*(nvidia-cutlass .* of " "$work/$name.log" \
    || fp8attn_die "$name: the CUTLASS headers did not come from the build environment's nvidia-cutlass"
  fp8attn_log "$name done in $((SECONDS - t0)) s"
}

# Checks an installed package from outside the source tree.
check_installed() {
  local venv="$1"
  (
    cd "$work"  # away from the clone: only the installed package can be imported
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
print("installed package:", ", ".join(f"{p.relative_to(package_dir)} ({p.stat().st_size} B)"
                                      for p in sorted(package_dir.rglob("*")) if p.is_file() and
                                      "__pycache__" not in p.parts))
assert venv in package_dir.parents, f"fp8attn was imported from {package_dir}, not from the venv {venv}"
assert Path(lib.path).resolve().parent == package_dir, f"loaded {lib.path}, not the package's own copy"
assert lib.version() == fp8attn.__version__, (lib.version(), fp8attn.__version__)
for shipped in ("_torch_op/fwd_op.cpp", "_torch_op/fwd_call.h", "_torch_op/eager_entry.cpp",
                "_torch_op/include/fp8attn/c_api.h", "_torch_op/include/fp8attn/params.h"):
    assert (package_dir / shipped).is_file(), f"the torch op's source {shipped} is not in the package"
print("check_installed: ok")
PY
  )
}

fp8attn_log "[1] fresh venv $work/venv ($(python3 --version)); pip install ." \
            "(FP8ATTN_HEAD_DIMS=$FP8ATTN_HEAD_DIMS, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
python3 -m venv "$work/venv"
pip_logged "pip-install" "$work/venv/bin/python" -m pip install "$src"
if [ -e "$src/.deps" ]; then
  fp8attn_die "pip install . wrote $src/.deps/: the build fetched with pip instead of using its build environment"
fi

fp8attn_log "[2] the installed package, from $work"
check_installed "$work/venv"

fp8attn_log "[3] pip wheel ."
pip_logged "pip-wheel" "$work/venv/bin/python" -m pip wheel --no-deps -w "$work/wheels" "$src"
"$work/venv/bin/python" - "$work/wheels" <<'PY'
import sys
import zipfile
from pathlib import Path

wheels = sorted(Path(sys.argv[1]).glob("fp8attn-*.whl"))
assert len(wheels) == 1, wheels
names = zipfile.ZipFile(wheels[0]).namelist()
for needed in ("fp8attn/libfp8attn.so", "fp8attn/__init__.py", "fp8attn/_torch_op/fwd_op.cpp",
               "fp8attn/_torch_op/fwd_call.h"):
    assert needed in names, f"{wheels[0].name} lacks {needed}"
print(f"{wheels[0].name}: {len(names)} files, {wheels[0].stat().st_size} B")
PY

fp8attn_log "[4] python -m build --sdist, then pip install of the sdist into a second fresh venv"
t0=$SECONDS
"$work/venv/bin/python" -m pip install --quiet build==1.3.0
"$work/venv/bin/python" -m build --sdist --outdir "$work/dist" "$src" > "$work/sdist.log" 2>&1 \
  || { tail -n 40 "$work/sdist.log"; fp8attn_die "python -m build --sdist failed (log above)"; }
sdist="$(ls "$work"/dist/fp8attn-*.tar.gz)"
"$work/venv/bin/python" - "$sdist" <<'PY'
import sys
import tarfile
from pathlib import Path

path = Path(sys.argv[1])
names = tarfile.open(path).getnames()
top = names[0].split("/")[0]
rel = [n[len(top) + 1:] for n in names if n.startswith(top + "/")]
stray = [n for n in rel if n.split("/")[0] in (".deps", "build", ".whl") or n.split("/")[0].startswith("build")]
assert not stray, f"the sdist holds build products or fetched dependencies: {stray[:5]}"
for needed in ("pyproject.toml", "CMakeLists.txt", "cmake/cutlass.cmake", "src/torch_op/fwd_op.cpp",
               "python/fp8attn/__init__.py"):
    assert needed in rel, f"the sdist lacks {needed}"
print(f"{path.name}: {len(rel)} files, {path.stat().st_size} B, no .deps/ or build/")
PY
fp8attn_log "sdist built in $((SECONDS - t0)) s"
python3 -m venv "$work/venv-sdist"
pip_logged "sdist-install" "$work/venv-sdist/bin/python" -m pip install "$sdist"
check_installed "$work/venv-sdist"

fp8attn_log "check_install: ok in $((SECONDS - start)) s (pip install ., pip wheel ., sdist; from a clean clone)"
