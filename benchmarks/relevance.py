"""JS relevance: chunked (mrtpo_openrlhf.core.js_relevance, its compiled and eager kernels) vs a naive
full-softmax computation.

Each measurement runs in a fresh subprocess. Peak extra memory is the process's peak RSS (VmHWM, reset
through /proc/self/clear_refs once the two input logit tensors exist) minus its RSS at that moment; on
CUDA (``--device cuda``) the peak allocated memory above what the inputs hold.

    python benchmarks/relevance.py                 # T in {512, 2048, 4096}, V = 151,936 (Qwen)
    python benchmarks/relevance.py --T 512 --dtype float32

Times exclude the compile: each process warms its kernel up on four positions first.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time

QWEN_VOCAB = 151_936


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Make VmHWM (peak RSS) restart from the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def naive_js(a, b, temperature=1.0):
    """Textbook JS distance over the whole (T, V) at once, fp32 (what the chunked path avoids)."""
    import torch

    p = torch.softmax(a.float() / temperature, -1)
    q = torch.softmax(b.float() / temperature, -1)
    m = 0.5 * (p + q)
    kl_pm = (p * (p.clamp_min(1e-30).log() - m.clamp_min(1e-30).log())).sum(-1)
    kl_qm = (q * (q.clamp_min(1e-30).log() - m.clamp_min(1e-30).log())).sum(-1)
    return (0.5 * (kl_pm + kl_qm) / math.log(2)).clamp(0, 1).sqrt()


KINDS = ("naive", "eager", "compiled")  # eager / compiled: js_relevance's kernels


def checksums_agree(measured: dict) -> bool:
    """Every kind's checksum within 1e-3 (relative, at least absolute) of the naive one's."""
    ref = measured["naive"]["checksum"]
    return all(abs(r["checksum"] - ref) <= 1e-3 * max(1.0, abs(ref)) for r in measured.values())


def measure(kind: str, T: int, V: int, dtype: str, chunk: int, threads: int, device: str = "cpu") -> dict:
    """One JS computation over (T, V) logits. CPU: peak RSS; CUDA: peak allocated memory (in-process)."""
    import torch

    from mrtpo_openrlhf.core import js_relevance

    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    g = torch.Generator().manual_seed(0)
    a = torch.empty(T, V, dtype=getattr(torch, dtype), device=device)
    b = torch.empty_like(a)
    for s in range(0, T, 64):  # fill in slices: no full-size fp32 temporaries before the measurement
        x = torch.randn(min(64, T - s), V, generator=g) * 2
        a[s : s + 64] = x.to(device)
        b[s : s + 64] = (x + torch.randn(x.shape, generator=g)).to(device)
    run = (
        (lambda x, y: naive_js(x, y))
        if kind == "naive"
        else (lambda x, y: js_relevance(x, y, chunk_size=chunk, kernel=kind))
    )
    run(a[:4], b[:4])  # kernels loaded (and compiled) before the clock starts
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        _reset_peak()
        base = _status_mib("VmRSS")
    t0 = time.perf_counter()
    out = run(a, b)
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _status_mib("VmHWM")
    return {
        "kind": kind,
        "T": T,
        "seconds": elapsed,
        "peak_extra_mib": max(0.0, peak - base),
        "checksum": float(out.double().sum()),
    }


def run_child(kind, T, V, dtype, chunk, threads, device="cpu"):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--T",
        str(T),
        "--V",
        str(V),
        "--dtype",
        dtype,
        "--chunk",
        str(chunk),
        "--threads",
        str(threads),
        "--device",
        device,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return {"kind": kind, "T": T, "error": (res.stderr.strip().splitlines() or ["killed"])[-1]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, nargs="+", default=[512, 2048, 4096])
    ap.add_argument("--V", type=int, default=QWEN_VOCAB)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--child", choices=KINDS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.T[0], args.V, args.dtype, args.chunk, args.threads, args.device)))
        return
    chunk_mib = args.chunk * args.V * 4 / 2**20
    print(
        f"JS relevance, V={args.V}, inputs {args.dtype}, chunk={args.chunk} positions "
        f"(one fp32 chunk of logits = {chunk_mib:.0f} MiB), {args.threads} threads, device {args.device}"
    )
    print(
        f"{'T':>6} | " + " | ".join(f"{k + ' s':>10} {k + ' MiB':>12}" for k in KINDS) + " | "
        f"{'naive/compiled time':>19} {'eager/compiled time':>19} {'naive/compiled mem':>18} | agree"
    )
    for T in args.T:
        m = {k: run_child(k, T, args.V, args.dtype, args.chunk, args.threads, args.device) for k in KINDS}
        failed = {k: r["error"] for k, r in m.items() if "error" in r}
        if failed:
            print(f"{T:>6} | " + "; ".join(f"{k}: {e}" for k, e in failed.items()))
            continue
        agree = checksums_agree(m)
        print(
            f"{T:>6} | "
            + " | ".join(f"{m[k]['seconds']:>10.2f} {m[k]['peak_extra_mib']:>12.0f}" for k in KINDS)
            + f" | {m['naive']['seconds'] / m['compiled']['seconds']:>19.2f} "
            f"{m['eager']['seconds'] / m['compiled']['seconds']:>19.2f} "
            f"{m['naive']['peak_extra_mib'] / max(m['compiled']['peak_extra_mib'], 1):>18.1f} | "
            f"{'yes' if agree else 'NO'}"
        )


if __name__ == "__main__":
    main()
