"""Replay cost against a GDPO step on the same model, measured side by side in one run.

A GDPO step on the actor is (at least) the experience maker's log-prob forward plus the PPO
forward+backward over the same sequences; MRTPO adds the replay forwards of the (response, reward)
pairs whose advantage is non-zero (12-21% of pairs in the paper). This times both with random token
ids on a real model and prints the overhead ratio. Generation (vLLM) and the optimizer step are
left out, so the printed share is an upper bound on the step-time overhead.

    python benchmarks/replay_overhead.py --model tiny            # seconds, a tiny random Llama
    python benchmarks/replay_overhead.py --model smollm2         # SmolLM2-135M-Instruct (CPU: minutes)
    python benchmarks/replay_overhead.py --model /path/to/Qwen2.5-Coder-3B-Instruct --device cuda --batch 64
"""
from __future__ import annotations

import argparse
import time

import torch


def load_model(name: str, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if name == "tiny":
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                          num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
        model = LlamaForCausalLM(cfg)
    else:
        if name == "smollm2":
            from mrtpo_openrlhf.models import ensure_smollm2

            name = str(ensure_smollm2())
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    model.config._attn_implementation = "sdpa"
    return model.to(device=device, dtype=dtype)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_it(fn, device: str, repeats: int) -> float:
    fn()  # warm-up
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=192)
    ap.add_argument("--response-len", type=int, default=128)
    ap.add_argument("--rewards", type=int, default=3)
    ap.add_argument("--block-len", type=int, default=24)
    ap.add_argument("--replay-frac", type=float, nargs="+", default=[0.12, 0.21, 1.0])
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from mrtpo_openrlhf.core import count_forwards, replay_relevance, request_from_ids

    dtype = getattr(torch, args.dtype)
    model = load_model(args.model, args.device, dtype)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    prompts = [ids(args.prompt_len) for _ in range(args.batch)]
    responses = [ids(args.response_len) for _ in range(args.batch)]
    blocks = [[ids(args.block_len) for _ in range(args.rewards)] for _ in range(args.batch)]
    seqs = torch.tensor([p + r for p, r in zip(prompts, responses)], device=args.device)

    def logprob_forward():
        with torch.no_grad():
            for s in seqs.split(args.micro_batch):
                model(input_ids=s).logits.float().log_softmax(-1)

    def train_forward_backward():
        model.train()
        for s in seqs.split(args.micro_batch):
            logits = model(input_ids=s).logits.float()
            logp = logits[:, :-1].log_softmax(-1).gather(-1, s[:, 1:, None]).squeeze(-1)
            (-logp[:, -args.response_len:].mean()).backward()
        model.zero_grad(set_to_none=True)
        model.eval()

    model.eval()
    t_logp = time_it(logprob_forward, args.device, args.repeats)
    t_train = time_it(train_forward_backward, args.device, args.repeats)
    t_gdpo = t_logp + t_train
    n_pairs = args.batch * args.rewards
    print(f"model={args.model} device={args.device} dtype={args.dtype} batch={args.batch} "
          f"prompt={args.prompt_len} response={args.response_len} K={args.rewards}")
    print(f"GDPO actor work per step: log-prob forward {t_logp:.3f}s + train fwd/bwd {t_train:.3f}s = {t_gdpo:.3f}s")
    print(f"{'replayed pairs':>15} | {'forwards':>8} | {'replay s':>8} | {'replay / GDPO step':>18}")
    for frac in args.replay_frac:
        n = max(1, round(frac * n_pairs))
        chosen = [divmod(j, args.rewards) for j in torch.randperm(n_pairs, generator=g)[:n].tolist()]
        per_row: dict[int, list[int]] = {}
        for i, k in chosen:
            per_row.setdefault(i, []).append(k)
        reqs = [request_from_ids(prompts[i], blocks[i], responses[i], sorted(ks)) for i, ks in per_row.items()]
        t_replay = time_it(lambda: replay_relevance(model, reqs, num_rewards=args.rewards,
                                                    micro_batch_size=args.micro_batch), args.device, args.repeats)
        print(f"{n:>6}/{n_pairs:<4} {frac:>4.0%} | {count_forwards(reqs, args.micro_batch):>8} | {t_replay:>8.3f} | "
              f"{t_replay / t_gdpo:>17.1%}")
    if args.device.startswith("cuda"):
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
