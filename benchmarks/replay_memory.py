"""Memory of one replay step against its floor, on SmolLM2-135M (or a tiny model), at the embedded default's and
the tool study's shapes, every figure measured side by side in one sitting.

Each mode runs in a fresh process (so one mode's allocator state cannot lower the next one's peak): load the model,
build the step's replay requests, settle, then run the mode while a thread samples the process's RSS every
millisecond. The figure is the peak above the settled RSS, i.e. what the step adds to a process that already holds
the model (glibc's mmap threshold is fixed at 128 KiB in these processes, so freed tensors leave the RSS):

- ``replay``: ``core.replay.replay_relevance`` as training runs it (prefix sharing, position-chunked JS);
- ``floor``: the least work a replay needs (replay_overhead.py's ``floor_work``: one prefix forward, every
  branch on a copy of its cache, logits at the response positions only, no JS);
- ``logits``: the floor's own floor, computed: a branch forward's logits at the response positions
  (micro-batch x response x vocabulary, in the model's dtype), kept for the full branch while a minus branch runs,
  so twice that.

    python benchmarks/replay_memory.py [--model smollm2|tiny|PATH] [--shape default study] [--frac 1.0]

Shapes: ``default`` = the embedded default (SQL: prompt 384 tokens, 3 blocks of 64 at its end, 96-token responses,
2 prompts x 4 samples); ``study`` = the tool study (prompt 512, 3 blocks of 48, 160-token responses, 2 prompts x 8).
``--frac`` is the share of (response, reward) pairs replayed (1.0: every pair, the worst case).

Measured 2026-12-02 on a 2-core Intel Xeon (AVX512, avx512_bf16/amx_bf16: bf16), SmolLM2-135M, every pair replayed,
micro-batch 4, with the tool study running beside it (memory figures do not depend on the load):
embedded default 182 MiB (floor 144, logits 72: 1.27x the floor); tool study 276 MiB (floor 184, logits 120: 1.50x).
So the replay adds a quarter of a GiB at most to the actor; it is not where the actor's memory goes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHAPES = {
    "default": dict(prompt=384, block=64, response=96, prompts=2, group=4, label="embedded default (SQL)"),
    "study": dict(prompt=512, block=48, response=160, prompts=2, group=8, label="tool study"),
}
MB = 2**20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler:
    """The largest RSS seen by a thread sampling every ``interval`` seconds while the block runs."""

    def __init__(self, interval: float = 0.001):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.interval)

    def __enter__(self):
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def build(model_name: str, shape: dict, frac: float, rewards: int, seed: int = 0):
    from replay_overhead import make_requests

    model = load(model_name)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    n = shape["prompts"] * shape["group"]
    prompts = [ids(shape["prompt"]) for _ in range(shape["prompts"])]
    responses = [ids(shape["response"]) for _ in range(n)]
    blocks = [[ids(shape["block"]) for _ in range(rewards)] for _ in range(n)]
    insert_at = shape["prompt"] - 5  # before the chat template's closing tokens
    _, requests, prompt_of = make_requests(prompts, blocks, responses, insert_at, frac, rewards, shape["group"], g)
    return model, requests, prompt_of


def load(name: str):
    from replay_overhead import load_model

    return load_model(name, "cpu", torch.bfloat16 if cpu_has_bf16() else torch.float32).eval()


def cpu_has_bf16() -> bool:
    from mrtpo_openrlhf.cpu import dtype as cpu_dtype

    return cpu_dtype.train_dtype() == "bf16"  # MRTPO_CPU_DTYPE, else bf16 only with bf16 instructions


def child(args) -> None:
    from replay_overhead import floor_items, floor_work

    from mrtpo_openrlhf.core import replay_relevance

    torch.manual_seed(0)
    model, requests, prompt_of = build(args.model, SHAPES[args.shape], args.frac, args.rewards)
    if args.mode == "replay":
        run = lambda: replay_relevance(model, requests, args.rewards, micro_batch_size=args.micro_batch)  # noqa: E731
    else:
        items = floor_items(requests, prompt_of)
        run = lambda: floor_work(model, items, args.micro_batch, "cpu")  # noqa: E731
    with torch.no_grad():
        run()  # warm-up: the JS kernel's compilation is not the step's
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    time.sleep(0.5)
    settled = rss_bytes()
    with PeakSampler() as sampler, torch.no_grad():
        run()
    print(json.dumps({"mode": args.mode, "added": sampler.peak - settled, "settled": settled}))


def run_mode(args, shape: str, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--model", args.model, "--shape", shape]
    cmd += ["--frac", str(args.frac), "--rewards", str(args.rewards), "--micro-batch", str(args.micro_batch)]
    # a fixed mmap threshold: every tensor over 128 KiB is its own mapping, returned when freed, so the RSS follows
    # the live tensors (with glibc's default a freed block stays resident and a second run grows nothing)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 << 10))
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{mode} ({shape}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny, or a model folder")
    ap.add_argument("--shape", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--frac", type=float, default=1.0, help="share of (response, reward) pairs replayed")
    ap.add_argument("--rewards", type=int, default=3)
    ap.add_argument("--micro-batch", type=int, default=4, help="contexts per replay forward (the default's 4)")
    ap.add_argument("--child", choices=["replay", "floor"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.mode = args.child
        args.shape = args.shape[0]
        child(args)
        return
    vocab = 49152 if args.model == "smollm2" else load(args.model).config.vocab_size
    width = 2 if cpu_has_bf16() else 4
    print(
        f"model={args.model} dtype={'bf16' if width == 2 else 'fp32'} cpu={torch.backends.cpu.get_cpu_capability()} "
        f"micro_batch={args.micro_batch} K={args.rewards} replayed pairs={args.frac:.0%}"
    )
    print(f"{'shape':<24} | {'replay MiB':>10} | {'floor MiB':>9} | {'logits MiB':>10} | {'replay/floor':>12}")
    for shape in args.shape:
        s = SHAPES[shape]
        replay, floor = run_mode(args, shape, "replay"), run_mode(args, shape, "floor")
        logits = 2 * args.micro_batch * s["response"] * vocab * width
        ratio = replay["added"] / floor["added"] if floor["added"] else float("nan")
        print(
            f"{s['label']:<24} | {replay['added'] / MB:>10.0f} | {floor['added'] / MB:>9.0f} | {logits / MB:>10.0f} | "
            f"{ratio:>12.2f}"
        )


if __name__ == "__main__":
    main()
