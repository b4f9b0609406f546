#!/usr/bin/env bash
# fp8attn: libfp8attn_torch.so (the C++ torch op, src/torch_op/fwd_op.cpp) and the eager entry
# fp8attn_eager<EXT_SUFFIX> (src/torch_op/eager_entry.cpp) next to a CARRIED libfp8attn.so.
#
#   bash scripts/build_torch_op.sh BUILD_DIR      (default: build/)
#
# For a GPU machine that runs a build made elsewhere (scripts/gpu_suite.sh): there the library was built on a
# machine without torch, so the op library is missing and the Python tests would run the ctypes op. This
# compiles the op against the torch of `python3` with the flags cmake/torch_op.cmake uses (stable ABI of torch
# 2.9, hidden visibility, the C ABI from libfp8attn.so through $ORIGIN; ~20 s), then the eager entry against
# that torch and that Python (ATen and the Python C API: it loads only under them; ~10 s). Needs g++.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
[ -f "$build/libfp8attn.so" ] || { echo "build_torch_op: $build/libfp8attn.so not found" >&2; exit 1; }
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
  -DTORCH_TARGET_VERSION=0x0209000000000000 \
  -I "$root/include" -isystem "$torch_dir/include" \
  "$root/src/torch_op/fwd_op.cpp" \
  -L "$torch_dir/lib" -ltorch_cpu -ltorch_cuda -L "$build" -lfp8attn -Wl,-rpath,'$ORIGIN' \
  -o "$build/libfp8attn_torch.so"
echo "build_torch_op: $build/libfp8attn_torch.so (torch at $torch_dir)"

read -r torch_version cxx11_abi python_include ext_suffix < <(python3 -c '
import sysconfig, torch
print(torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI), sysconfig.get_paths()["include"],
      sysconfig.get_config_var("EXT_SUFFIX"))')
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
  -D_GLIBCXX_USE_CXX11_ABI="$cxx11_abi" -DFP8ATTN_EAGER_TORCH_VERSION="\"$torch_version\"" \
  -I "$root/include" -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" \
  -isystem "$python_include" \
  "$root/src/torch_op/eager_entry.cpp" \
  -L "$torch_dir/lib" -ltorch_python -ltorch_cpu -ltorch_cuda -lc10 -L "$build" -lfp8attn -Wl,-rpath,'$ORIGIN' \
  -o "$build/fp8attn_eager$ext_suffix"
echo "build_torch_op: $build/fp8attn_eager$ext_suffix (torch $torch_version, $(python3 --version))"
