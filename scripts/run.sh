#!/usr/bin/env bash
# fp8attn — THE main-job command (README): bash scripts/run.sh [benchmark args...]
#
# Sets up and builds like scripts/test.sh (the library and the demo; no tests), then
#   on a machine with an NVIDIA GPU: runs the benchmarks bench/bench_prefill.py and bench/bench_decode.py
#                                    (they need PyTorch with CUDA; extra arguments are passed to both), then
#                                    bench/bench_vllm.py, the vLLM 0.34 call replay (no extra arguments: its
#                                    options differ), against the FA3 anchors when .anchors/ (or anchors.tar.xz,
#                                    unpacked into it) is there: their build (../shared/tools/fa3_anchor.sh)
#                                    starts before the other benchmarks and is waited for before the replay;
#   otherwise:                       runs the CPU reference demo, build/fp8attn_demo.
#
#   FP8ATTN_HEAD_DIMS=128 bash scripts/run.sh    build one head dim only (minutes instead of the full build)
#   FP8ATTN_NO_BUILD=1 bash scripts/run.sh       use an existing build dir as it is (e.g. one carried over)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$FP8ATTN_ROOT"

if [ "${FP8ATTN_NO_BUILD:-0}" = 1 ]; then
  [ -f "$FP8ATTN_BUILD_DIR/libfp8attn.so" ] || fp8attn_die "FP8ATTN_NO_BUILD=1 but $FP8ATTN_BUILD_DIR/libfp8attn.so does not exist"
  fp8attn_log "FP8ATTN_NO_BUILD=1: using $FP8ATTN_BUILD_DIR as it is"
else
  fp8attn_setup_system build
  fp8attn_build -DFP8ATTN_BUILD_TESTS=OFF || fp8attn_die "build failed"
fi
export LD_LIBRARY_PATH="$FP8ATTN_BUILD_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fp8attn_python_env "$FP8ATTN_BUILD_DIR"

if fp8attn_have_gpu; then
  fp8attn_log "NVIDIA GPU: $(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)"
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 \
    || fp8attn_die "the benchmarks need PyTorch with CUDA (python3 -c 'import torch; torch.cuda.is_available()' failed)"
  # FlashAttention-3 anchors for the vLLM replay: built in the background while the other benchmarks run.
  if [ ! -d .anchors ] && [ -f anchors.tar.xz ]; then
    mkdir -p .anchors && tar -xJf anchors.tar.xz -C .anchors
  fi
  anchors=0
  if [ -f .anchors/fa3_anchor.sh ]; then
    anchors=1
    bash .anchors/fa3_anchor.sh build all || fp8attn_log "WARNING: the FA3 anchor build did not start"
  fi
  rc=0
  for bench in bench/bench_prefill.py bench/bench_decode.py; do
    fp8attn_log "python3 $bench $*"
    python3 "$bench" "$@" || { fp8attn_log "ERROR: $bench failed"; rc=1; }
  done
  vllm_flag=--no-fa3
  if [ "$anchors" = 1 ]; then  # an anchor that fails to build leaves its columns null, not the replay undone
    bash .anchors/fa3_anchor.sh wait all || fp8attn_log "WARNING: an FA3 anchor is not built; its columns will be null"
    vllm_flag=""
  fi
  fp8attn_log "python3 bench/bench_vllm.py $vllm_flag"
  python3 bench/bench_vllm.py ${vllm_flag:+"$vllm_flag"} || { fp8attn_log "ERROR: bench/bench_vllm.py failed"; rc=1; }
  exit "$rc"
fi

echo "no NVIDIA GPU found: fp8attn's kernels need an SM90 GPU (H100/H200); running the CPU reference demo instead"
[ -x "$FP8ATTN_BUILD_DIR/fp8attn_demo" ] || fp8attn_die "$FP8ATTN_BUILD_DIR/fp8attn_demo was not built (FP8ATTN_BUILD_EXAMPLES=OFF?)"
exec "$FP8ATTN_BUILD_DIR/fp8attn_demo"
