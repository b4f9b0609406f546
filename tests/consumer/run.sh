#!/usr/bin/env bash
# ctest cpu.install.Consumer: installs the fp8attn build BUILD_DIR into BUILD_DIR/consumer/install, builds
# tests/consumer against that installed tree (find_package(fp8attn)) and runs it. Only the installed files
# are used: the consumer sees neither the source tree nor the build tree.
#
#   bash tests/consumer/run.sh BUILD_DIR [CUDA_BIN_DIR]
set -euo pipefail
build_dir="$1"
cuda_bin="${2:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$build_dir/consumer"
rm -rf "$work"
mkdir -p "$work"

cmake --install "$build_dir" --prefix "$work/install" >"$work/install.log"
echo "installed: $(cd "$work/install" && find . -type f | sort | tr '\n' ' ')"

cuda_root=()
if [ -n "$cuda_bin" ]; then cuda_root=("-DCUDAToolkit_ROOT=$(dirname "$cuda_bin")"); fi
cmake -S "$here" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/install" \
      "${cuda_root[@]}" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/build/fp8attn_consumer"
