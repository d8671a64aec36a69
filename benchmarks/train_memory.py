"""Activation memory of one training step's forward/backward on SmolLM2-135M, by micro-batch size, side by side.

    python benchmarks/train_memory.py [--model .cache/models/SmolLM2-135M-Instruct-bf16] [--rows 8 --positions 360]

Each setting runs in a fresh process: load the model (bf16, sdpa), run the step once (warm-up), then run it again
while a thread samples the RSS every millisecond; the figure is the peak above the settled RSS. The step is what the
embedded default's actor does with its 8 sequences (about 230 prompt + 96 response tokens, padded): fp32 log-probs
at the response positions, backward, in micro-batches of ``--micro`` sequences (gradients accumulate), and once with
gradient checkpointing at the whole batch. glibc's mmap threshold is fixed at 128 KiB there, so freed tensors leave
the RSS. Measured 2026-12-02, 2-core Intel Xeon (AVX512, avx512_bf16), a study running beside it (times are under
load; memory does not depend on it): 8 at once 3.4 GiB / 44 s, 4 at a time 1.7 GiB / 39 s, 2 at a time 0.9 GiB /
59 s, 8 with checkpointing 1.5 GiB / 39 s.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import torch


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(args) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.positions))
    r = args.response

    def step():
        for rows in ids.split(args.micro):
            logits = model(rows).logits.float()
            logp = torch.log_softmax(logits[:, -r - 1 : -1], -1).gather(-1, rows[:, -r:, None]).squeeze(-1)
            (-logp.mean()).backward()
            del logits, logp

    step()
    model.zero_grad(set_to_none=False)  # the gradients stay allocated, as DeepSpeed's do
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    time.sleep(0.3)
    settled, peak, stop = rss_bytes(), [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.time()
    step()
    seconds = time.time() - t0
    stop.set()
    sampler.join()
    print(json.dumps({"added": max(peak[0], rss_bytes()) - settled, "seconds": seconds}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=".cache/models/SmolLM2-135M-Instruct-bf16")
    ap.add_argument("--rows", type=int, default=8, help="sequences in the step (the default's 2 prompts x 4)")
    ap.add_argument("--positions", type=int, default=360)
    ap.add_argument("--response", type=int, default=96)
    ap.add_argument("--micro", type=int, nargs="+", default=[8, 4, 2])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.micro = args.micro[0]
        return child(args)
    print(f"CPU: {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores; {args.rows} x {args.positions}")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 << 10))
    settings = [(m, False) for m in args.micro] + [(args.rows, True)]
    for micro, ckpt in settings:
        cmd = [sys.executable, __file__, "--child", "--model", args.model, "--rows", str(args.rows)]
        cmd += ["--positions", str(args.positions), "--response", str(args.response), "--micro", str(micro)]
        out = subprocess.run(cmd + ["--checkpointing"] * ckpt, capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        res = json.loads(out.stdout.strip().splitlines()[-1])
        label = f"micro-batch {micro}" + (" + checkpointing" if ckpt else "")
        print(f"{label:<28} {res['added'] / 2**30:5.2f} GiB  {res['seconds']:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
