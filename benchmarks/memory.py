"""Memory of a training process under glibc's default allocator, with malloc_trim after each micro-batch, and with
a fixed mmap threshold (what the CPU launcher sets), side by side in one sitting; plus the logits a log-prob
forward holds at all positions against the response positions only (``ResponseLogitsActor``).

    python benchmarks/memory.py [--model .cache/models/SmolLM2-135M-Instruct-bf16] [--rows 4 --positions 300]

Each mode runs in its own process: SmolLM2's forward and backward with fp32 log-prob logits and AdamW, three
steps of two micro-batches; it prints the PSS at micro-batch ends (peak), at the end, and the time. Measured on a
2-core AVX512 (avx512_bf16, amx_bf16) Xeon with a study running beside it (so times are slow but side by side):
default 2655 MB peak / 509 s, trim 1350 MB / 460 s, MALLOC_MMAP_THRESHOLD_=262144 1383 MB / 467 s.
"""

import argparse
import ctypes
import os
import subprocess
import sys
import time

import torch


def pss_mb() -> float:
    for line in open(f"/proc/{os.getpid()}/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(model_path: str, mode: str, rows: int, positions: int, response: int) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    libc = ctypes.CDLL("libc.so.6")
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    vocab = model.config.vocab_size
    t0, peak = time.time(), 0.0
    for _ in range(3):
        for _ in range(2):
            ids = torch.randint(0, vocab, (rows, positions))
            logits = model(ids).logits.float()
            lp = torch.log_softmax(logits, -1).gather(-1, ids.roll(-1, 1).unsqueeze(-1)).squeeze(-1)
            loss = -lp[:, -response:].mean()
            loss.backward()
            del logits, lp, loss
            if mode == "trim":
                libc.malloc_trim(0)
            peak = max(peak, pss_mb())
        opt.step()
        opt.zero_grad()
        if mode == "trim":
            libc.malloc_trim(0)
    print(f"{mode:<8} peak {peak:7.0f} MB  end {pss_mb():7.0f} MB  {time.time() - t0:6.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=".cache/models/SmolLM2-135M-Instruct-bf16")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--positions", type=int, default=300)
    parser.add_argument("--response", type=int, default=96)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.model, args.child, args.rows, args.positions, args.response)
    print(f"CPU: {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")
    full = 4 * args.rows * args.positions * 49152 / 2**20
    kept = 4 * args.rows * (args.response + 1) * 49152 / 2**20
    print(f"fp32 log-prob logits of one micro-batch: all positions {full:.0f} MB, response positions {kept:.0f} MB")
    for mode in ("default", "trim", "mmap"):
        env = dict(os.environ)
        env.pop("MALLOC_MMAP_THRESHOLD_", None)
        if mode == "mmap":
            env["MALLOC_MMAP_THRESHOLD_"] = "262144"
        flags = ["--model", args.model, "--rows", str(args.rows), "--positions", str(args.positions)]
        subprocess.run([sys.executable, __file__, *flags, "--child", mode], env=env, check=True)


if __name__ == "__main__":
    main()
