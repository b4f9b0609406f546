"""Shared benchmark machinery: device checks that fail loudly, a cold-L2 flush, CUDA-event and CUDA-graph
timing (median after warm-up), run metadata, JSON/PNG output and tables.

Benchmarks never time a missing library or device as zero: ``require_device`` raises before any run.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import torch

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
# The package is used from the source tree, or from FP8ATTN_PACKAGE_DIR (ab_libs.py --python: a library of another
# C ABI with its own commit's package).
sys.path.insert(0, os.environ.get("FP8ATTN_PACKAGE_DIR") or str(REPO_ROOT / "python"))

import fp8attn  # noqa: E402

FLUSH_MIN_BYTES = 64 << 20


def require_device() -> torch.device:
    """The CUDA device to benchmark on; raises unless there is an SM90 GPU and a loadable libfp8attn.so."""
    if not torch.cuda.is_available():
        raise SystemExit("fp8attn bench: no CUDA device visible; nothing to measure")
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        raise SystemExit(f"fp8attn bench: needs an SM90 (Hopper) GPU, found sm_{major}{minor} "
                         f"({torch.cuda.get_device_name()})")
    lib = fp8attn.get_lib()  # raises LibraryNotFoundError with the searched paths
    print(f"fp8attn: {lib.path}, kernels: {len(lib.compiled_kernels())}; GPU: {torch.cuda.get_device_name()}")
    return torch.device("cuda", torch.cuda.current_device())


def git_commit() -> str:
    """HEAD of the repository, with '-dirty' when the work tree has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def library_build_info() -> dict[str, Any]:
    """build_info.json beside the loaded libfp8attn.so (written by the build: the commit it was built from), or {}
    for a library without one (an installed wheel, an older build)."""
    path = Path(fp8attn.get_lib().path).resolve().parent / "build_info.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_metadata() -> dict[str, Any]:
    """What a result must carry to be comparable later: commit, GPU, date, software versions. ``commit`` is the
    commit the measured library was built from when its build says so (a GPU machine's checkout may be older
    than the build it was handed), else this checkout's HEAD; ``bench_commit`` is always this checkout's HEAD."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    build = library_build_info()
    bench_commit = git_commit()
    library_commit = build.get("commit", "unknown")
    if library_commit != "unknown" and build.get("dirty"):
        library_commit += "-dirty"
    return {
        "commit": library_commit if library_commit != "unknown" else bench_commit,
        "bench_commit": bench_commit,
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "fp8attn_kernels": fp8attn.compiled_kernels(),
    }


class L2Flush:
    """A buffer whose zero_() evicts the working set from L2 between timed runs: ``nbytes``, by default
    max(64 MB, 2 x L2).

    ``kind="read"`` evicts by reading the buffer instead (a reduction over it). A zero_() leaves the L2 full of
    dirty lines, and whatever runs next pays for writing them back to HBM while it reads its own data; a read
    leaves clean lines, as the weight reads between two attention layers of a decode step do."""

    KINDS = ("zero", "read")

    def __init__(self, device: torch.device, nbytes: Optional[int] = None, kind: str = "zero") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"L2Flush kind: expected one of {self.KINDS}, got {kind!r}")
        l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        self.nbytes = nbytes or max(FLUSH_MIN_BYTES, 2 * l2_bytes)
        self.kind = kind
        self.buffer = torch.zeros(self.nbytes, dtype=torch.uint8, device=device)
        self.words = self.buffer.view(torch.int32)
        self.sink = torch.empty((), dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.kind == "zero":
            self.buffer.zero_()
        else:
            torch.amax(self.words, dim=0, out=self.sink)


def capture_graph(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    """Captures fn() into a CUDA graph after one run on a side stream (lazy initialisation, library load
    and allocator warm-up must not happen inside capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def event_run(run: Callable[[], Any], flush: Optional[L2Flush] = None) -> tuple[torch.cuda.Event, torch.cuda.Event]:
    """Enqueues run() between two timing events, after an L2 flush outside them when ``flush`` is given; the
    caller reads start.elapsed_time(end) once the stream has reached the end event."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if flush is not None:
        flush()
    start.record()
    run()
    end.record()
    return start, end


def median_event_ms(run: Callable[[], Any], *, flush: Optional[L2Flush] = None, warmup: int = 3,
                    iters: int = 50) -> float:
    """Median milliseconds of run(), each run between its own CUDA events, after ``warmup`` untimed runs; with
    ``flush``, the L2 is flushed before each run, outside the events."""
    for _ in range(warmup):
        run()
    pairs = [event_run(run, flush) for _ in range(iters)]
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def time_graph(graph: torch.cuda.CUDAGraph, *, warmup: int = 3, iters: int = 50) -> float:
    """Median milliseconds of one graph replay, each replay between its own CUDA events."""
    return median_event_ms(graph.replay, warmup=warmup, iters=iters)


def back_to_back(fn: Callable[[], Any], reps: int = 8) -> Callable[[], Any]:
    """A run of ``reps`` fn() calls back to back, as a replay of one CUDA graph, so that the host path of an
    eager call does not leave the GPU idle inside a timed window. A callable that cannot be captured runs as
    ``reps`` eager calls instead (host time may then show for short kernels)."""
    try:
        return capture_graph(lambda: [fn() for _ in range(reps)]).replay
    except RuntimeError as err:
        print(f"  [timing] CUDA graph capture failed ({str(err).splitlines()[0][:80]}); timing eager calls")
        torch.cuda.synchronize()

        def run() -> None:
            for _ in range(reps):
                fn()
        return run


TIMING_MODES = ("interleaved", "consecutive")


def time_implementations(fns: dict[str, Callable[[], Any]], *, flush: Optional[L2Flush], mode: str = "interleaved",
                         warmup: int = 3, iters: int = 20, reps: int = 8, settle_s: float = 0.3,
                         optional: Iterable[str] = (), trace: bool = False) -> dict[str, list[float]]:
    """GPU milliseconds of one call of each fn, per timed run of its ``reps`` calls (captured once by
    back_to_back), each run after an L2 flush.

    The card's clocks are not locked: under load they follow the power draw of the last tens of ms, so the
    clock a kernel is timed at depends on what ran just before it (docs/timing.md). ``interleaved``: after
    ``warmup`` runs of each, ``iters`` rounds time every fn once, the order rotated by one place per round, so
    that all of them are timed at the same clocks. ``consecutive``: each fn in turn runs untimed for
    ``settle_s`` seconds and then ``iters`` times timed, at the clock its own power draw settles to, as a
    benchmark of it alone would see. ``trace`` prints each timed window's wall-clock start and end (to match a
    clock log). An ``optional`` fn (a peer) whose capture raises is left out of the result with a message;
    any other's error propagates (our own measurements must fail loudly)."""
    if mode not in TIMING_MODES:
        raise ValueError(f"timing mode: expected one of {TIMING_MODES}, got {mode!r}")
    runs: dict[str, Callable[[], Any]] = {}
    for name, fn in fns.items():
        if name in optional:
            run = try_peer(name, lambda fn=fn: back_to_back(fn, reps))
            if run is not None:
                runs[name] = run
        else:
            runs[name] = back_to_back(fn, reps)
    names = list(runs)
    events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {name: [] for name in names}

    def timed(name: str) -> None:
        events[name].append(event_run(runs[name], flush))

    def window(label: str, body: Callable[[], None]) -> None:
        began = time.time()
        body()
        torch.cuda.synchronize()
        if trace:
            print(f"  [window] {label} {began:.3f} {time.time():.3f}")

    if mode == "interleaved":
        for _ in range(warmup):
            for name in names:
                runs[name]()
        window("+".join(names), lambda: [timed(name) for i in range(iters)
                                         for name in names[i % len(names):] + names[:i % len(names)]])
    else:
        for name in names:
            settle_until = time.time() + settle_s
            while True:  # at least ``warmup`` runs, as in the interleaved mode
                for _ in range(warmup):
                    if flush is not None:
                        flush()
                    runs[name]()
                torch.cuda.synchronize()
                if time.time() >= settle_until:
                    break
            window(name, lambda name=name: [timed(name) for _ in range(iters)])
    return {name: [s.elapsed_time(e) / reps for s, e in pairs] for name, pairs in events.items()}


def importable(module: str) -> bool:
    """Whether an optional peer's module can be imported (a broken install counts as absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def try_peer(name: str, fn: Callable[[], Optional[float]]) -> Optional[float]:
    """Runs a peer's measurement; a peer that is absent or fails is reported and recorded as None, never
    as a number (our own measurements are not wrapped: they must fail loudly)."""
    try:
        return fn()
    except Exception as err:  # a peer library's failure must not hide our results
        print(f"  [{name}] skipped: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return None


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {path}")


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None (with a note) when matplotlib is absent."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no PNG written")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    print(f"wrote {path}")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; None prints as '-', floats with 4 significant digits."""
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
        return str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in text]
    return "\n".join(lines)
