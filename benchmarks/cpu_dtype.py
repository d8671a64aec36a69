"""fp32 vs bf16 matmul speed on this CPU, at the shape that dominates the embedded default's training step.

The lm_head backward of SmolLM2-135M on a 600-token micro-batch multiplies (600 x 49,152) by (49,152 x 576).
Without bf16 instructions (no avx512_bf16 / amx_bf16) PyTorch emulates bf16 and this runs ~70x slower than
fp32, which is why CPU mode picks its dtype from the hardware (mrtpo_openrlhf/cpu/dtype.py, docs/cpu.md).

    python benchmarks/cpu_dtype.py                       # the default shape, fp32 and bf16 side by side
    python benchmarks/cpu_dtype.py --m 600 --k 49152 --n 576 --repeats 5 --budget 60
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/cpu_dtype.py   # an AVX2-only CPU, emulated

Each dtype: one warm-up call, then up to ``--repeats`` timed calls (fewer once ``--budget`` seconds are spent);
the best time gives GFLOP/s = 2 m k n / t. Prints the CPU (torch capability, the cpuinfo bf16 flags, threads)
and one JSON line for the record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def time_matmul(m: int, k: int, n: int, dtype, repeats: int, budget: float) -> dict:
    """Best-of wall time of ``a @ b`` with a: (m, k), b: (k, n) in ``dtype``."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    t0 = time.perf_counter()
    reference = a @ b  # warm-up (oneDNN primitive creation, page faults)
    times = [time.perf_counter() - t0]
    spent = times[0]
    assert reference.shape == (m, n)
    for _ in range(repeats):
        if spent > budget:
            break
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    timed = times[1:] or times  # a warm-up past the budget is the only figure (slow path: one call is plenty)
    best = min(timed)
    return {"seconds": best, "gflops": 2 * m * k * n / best / 1e9, "timed_calls": len(timed)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=600, help="tokens in the micro-batch")
    ap.add_argument("--k", type=int, default=49_152, help="vocabulary (SmolLM2)")
    ap.add_argument("--n", type=int, default=576, help="hidden size (SmolLM2-135M)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per dtype after the warm-up call")
    args = ap.parse_args(argv)

    import torch

    from mrtpo_openrlhf.cpu.dtype import bf16_flags, read_cpuinfo, resolve

    flags = bf16_flags(read_cpuinfo())
    cpu = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpuinfo_bf16_flags": list(flags),
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "auto_dtype": resolve("auto").dtype,
    }
    print(
        f"torch {cpu['torch']}, CPU capability {cpu['cpu_capability']}, cpuinfo bf16 flags "
        f"{', '.join(flags) or 'none'}, {cpu['threads']} threads; MRTPO_CPU_DTYPE=auto would pick "
        f"{cpu['auto_dtype']}"
    )
    print(f"matmul ({args.m} x {args.k}) @ ({args.k} x {args.n}), {2 * args.m * args.k * args.n / 1e9:.1f} GFLOP")
    results = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        results[name] = time_matmul(args.m, args.k, args.n, dtype, args.repeats, args.budget)
        r = results[name]
        print(
            f"  {name}: {r['gflops']:8.1f} GFLOP/s  ({r['seconds'] * 1e3:9.1f} ms best of {r['timed_calls']})",
            flush=True,
        )
    ratio = results["fp32"]["gflops"] / results["bf16"]["gflops"]
    print(f"  fp32 / bf16 speed: {ratio:.2f}x")
    print(json.dumps({"shape": [args.m, args.k, args.n], **cpu, **results, "fp32_over_bf16": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
