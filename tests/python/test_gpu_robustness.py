"""Robustness of the Python API on SM90 GPUs: empty batches, devices, concurrency.

  - Empty is valid: a varlen batch whose every key length is 0 (k and v have no elements, so torch hands
    over NULL) gives zeros and an LSE of -inf, as FlashAttention; total_q == 0 writes nothing.
  - A call with tensors on two devices is refused by name; a call on cuda:1 with tensors there works while
    cuda:0 is current, and never creates a context on cuda:0 (checked in a fresh process through the driver).
  - Two streams used from two host threads at once give the bits of serial calls.
  - A refusal by the library carries the name of the function called; FP8ATTN_CHECK_DEVICE_ARGS=1 names an
    out-of-range value inside seqused_k.
The two-device tests skip, saying so, on a machine with fewer than two GPUs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import fp8attn  # noqa: E402

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
REPO_ROOT = Path(__file__).resolve().parents[2]


def needs_two_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, found {torch.cuda.device_count()} (run on a 2-GPU machine)")


def fp8_randn(*shape: int, device: str = "cuda") -> "torch.Tensor":
    return torch.randn(*shape, device=device).to(E4M3)


def test_all_key_lengths_zero_gives_zeros_and_minus_inf_lse() -> None:
    hq, hkv, d, lens_q = 8, 2, 128, [3, 1, 5]
    q = fp8_randn(sum(lens_q), hq, d)
    k = torch.empty(0, hkv, d, dtype=E4M3, device="cuda")  # no elements: torch's data pointer is NULL
    cu_q = torch.tensor([0, 3, 4, 9], dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(4, dtype=torch.int32, device="cuda")
    out, lse = fp8attn.flash_attn_varlen_func(q, k, k, max(lens_q), cu_q, 0, cu_seqlens_k=cu_k, causal=True,
                                              return_softmax_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out.float(), torch.zeros_like(out, dtype=torch.float32))
    assert torch.isneginf(lse).all()


def test_no_query_rows_writes_nothing() -> None:
    hq, hkv, d = 8, 2, 128
    q = torch.empty(0, hq, d, dtype=E4M3, device="cuda")
    k = fp8_randn(10, hkv, d)
    zero = torch.zeros(2, dtype=torch.int32, device="cuda")
    out, lse = fp8attn.flash_attn_varlen_func(q, k, k, 0, zero, 10, cu_seqlens_k=torch.tensor(
        [0, 10], dtype=torch.int32, device="cuda"), return_softmax_lse=True)
    torch.cuda.synchronize()
    assert out.shape == (0, hq, d) and lse.shape == (hq, 0)


def test_tensors_on_two_devices_rejected() -> None:
    needs_two_gpus()
    q = fp8_randn(2, 16, 4, 128, device="cuda:0")
    k = fp8_randn(2, 32, 4, 128, device="cuda:1")
    with pytest.raises(ValueError, match=r"fp8attn\.flash_attn_func: k is on cuda:1 but q is on cuda:0"):
        fp8attn.flash_attn_func(q, k, k)


# Run in a fresh process, so that nothing else has touched cuda:0: the driver's primary-context state of
# device 0 must still be inactive after a call on cuda:1 (while cuda:0 is torch's current device).
SECOND_DEVICE_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, sys.argv[1])
    import torch, fp8attn
    libcuda = ctypes.CDLL("libcuda.so.1")
    def context_active(ordinal):
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert libcuda.cuInit(0) == 0
        assert libcuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
        assert libcuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0
        return bool(active.value)
    torch.manual_seed(0)
    q = torch.randn(2, 64, 8, 128).to(torch.float8_e4m3fn).to("cuda:1")
    k = torch.randn(2, 200, 2, 128).to(torch.float8_e4m3fn).to("cuda:1")
    v = torch.randn(2, 200, 2, 128).to(torch.float8_e4m3fn).to("cuda:1")
    before = context_active(0)
    out = fp8attn.flash_attn_func(q, k, v, causal=True, num_splits=3)
    torch.cuda.synchronize(1)
    after = context_active(0)
    # Now cuda:0 may be used: the same call there must give the same bits (same kernel, same plan).
    on_first = fp8attn.flash_attn_func(q.to("cuda:0"), k.to("cuda:0"), v.to("cuda:0"), causal=True, num_splits=3)
    same = torch.equal(out.cpu(), on_first.cpu())
    print(f"out on {out.device}; cuda:0 context active before={before} after={after}; same bits on cuda:0: {same}")
    sys.exit(0 if out.device.index == 1 and not before and not after and same else 1)
""")


def test_call_on_second_device_never_touches_the_first() -> None:
    needs_two_gpus()
    result = subprocess.run([sys.executable, "-c", SECOND_DEVICE_SCRIPT, str(REPO_ROOT / "python")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"


def test_two_streams_two_threads_same_bits_as_serial() -> None:
    calls = []
    for seed, (b, sq, sk) in enumerate([(2, 300, 700), (8, 1, 4000), (1, 64, 64)]):
        torch.manual_seed(seed)
        q, k, v = fp8_randn(b, sq, 16, 128), fp8_randn(b, sk, 4, 128), fp8_randn(b, sk, 4, 128)
        calls.append((q, k, v))
    serial = [fp8attn.flash_attn_func(q, k, v, causal=True, return_softmax_lse=True) for q, k, v in calls]
    torch.cuda.synchronize()

    rounds, results, errors = 20, [[], []], []
    start = threading.Barrier(2)

    def worker(index: int) -> None:
        try:
            stream = torch.cuda.Stream()
            start.wait()
            with torch.cuda.stream(stream):
                for r in range(rounds):
                    q, k, v = calls[(index + r) % len(calls)]
                    results[index].append(((index + r) % len(calls),
                                           fp8attn.flash_attn_func(q, k, v, causal=True, return_softmax_lse=True)))
            stream.synchronize()
        except Exception as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for per_thread in results:
        assert len(per_thread) == rounds
        for which, (out, lse) in per_thread:
            assert torch.equal(out, serial[which][0]) and torch.equal(lse, serial[which][1]), f"call {which}"


def test_library_errors_name_the_function_called() -> None:
    # A layout the Python checks pass and the library refuses: a q row stride that is not 16-byte aligned.
    hq, hkv, d, t = 4, 2, 128, 9
    q = fp8_randn(t, hq * d + 8)[:, : hq * d].unflatten(1, (hq, d))
    k = fp8_randn(t, hkv, d)
    cu = torch.tensor([0, t], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"^fp8attn\.flash_attn_varlen_func: q_row_stride: expected a multiple of 16"):
        fp8attn.flash_attn_varlen_func(q, k, k, t, cu, t, cu_seqlens_k=cu)


# FP8ATTN_CHECK_DEVICE_ARGS is read once per process: a fresh one, with it set.
DEVICE_ARGS_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import torch, fp8attn
    q = torch.randn(4, 8, 128, device="cuda").to(torch.float8_e4m3fn)
    cache = torch.randn(2, 16, 16, 2, 128, device="cuda").to(torch.float8_e4m3fn)
    cu_q = torch.arange(5, dtype=torch.int32, device="cuda")
    table = torch.arange(16, dtype=torch.int32, device="cuda").reshape(4, 4)
    used = torch.tensor([5, 64, 65, 0], dtype=torch.int32, device="cuda")  # 65 > max_seqlen_k = 64
    try:
        fp8attn.flash_attn_varlen_func(q, cache[0], cache[1], 1, cu_q, 64, seqused_k=used, block_table=table)
    except ValueError as err:
        print(err)
        sys.exit(0 if "seqused_k[2]" in str(err) and "(FP8ATTN_CHECK_DEVICE_ARGS)" in str(err) else 1)
    print("accepted")
    sys.exit(1)
""")


def test_debug_check_names_out_of_range_device_values() -> None:
    env = dict(os.environ, FP8ATTN_CHECK_DEVICE_ARGS="1")
    result = subprocess.run([sys.executable, "-c", DEVICE_ARGS_SCRIPT, str(REPO_ROOT / "python")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
