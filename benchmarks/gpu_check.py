"""GPU check: the replay against GDPO actor work and against its floor, and the JS kernels (compiled, eager)
against a naive one, on random-initialised Qwen2.5-Coder-3B and -7B (their published configs below, nothing
downloaded), in bf16.
Needs only PyTorch and transformers. Prints one table; run through ``benchmarks/gpu_check.sh``.

    bash benchmarks/gpu_check.sh                         # one GPU, under 8 minutes
    bash benchmarks/gpu_check.sh --tiny --device cpu     # smoke run with tiny shapes (tests/benchmarks)
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import relevance as relevance_bench  # noqa: E402
import replay_overhead  # noqa: E402

_QWEN2 = dict(
    model_type="qwen2",
    architectures=["Qwen2ForCausalLM"],
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    rms_norm_eps=1e-6,
    rope_theta=1_000_000.0,
    use_sliding_window=False,
    bos_token_id=151643,
    eos_token_id=151645,
    max_position_embeddings=32768,
)

# Published config.json values of Qwen/Qwen2.5-Coder-{3B,7B}-Instruct (architecture fields).
CONFIGS = {
    "qwen2.5-coder-3b": dict(
        _QWEN2,
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
    "qwen2.5-coder-7b": dict(
        _QWEN2,
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    ),
}
TINY = {
    "qwen2-tiny": dict(
        _QWEN2,
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
    )
}


def build(config: dict, device: str, dtype: torch.dtype):
    """Random-initialised causal LM from a config dict, built directly on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def shared_vs_unshared(model, vocab: int, device: str, tiny: bool) -> float:
    """Max |q_shared - q_unshared| over a few SQL-like and inline requests (same model, same dtype)."""
    from mrtpo_openrlhf.core import replay_relevance, request_from_ids

    g = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    plen, blen, rlen = (24, 4, 8) if tiny else (512, 32, 128)
    reqs = [
        request_from_ids(
            ids(plen + 7 * i),
            [ids(blen), ids(blen + i), ids(blen)],
            ids(rlen + 3 * i),
            [0, 1, 2],
            insert_at=(plen - 5) if i % 2 else plen // 2,
        )
        for i in range(4)
    ]
    q, _ = replay_relevance(model, reqs, num_rewards=3, device=device)
    q_ref, _ = replay_relevance(model, reqs, num_rewards=3, device=device, share_prefix=False)
    return float((q - q_ref).abs().max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny model and shapes (a smoke run, any device)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8, help="responses per prompt (GRPO's n_samples_per_prompt)")
    ap.add_argument("--js-T", type=int, nargs="+", default=[512, 2048, 4096])
    args = ap.parse_args()
    t_start = time.time()
    cuda = args.device.startswith("cuda")
    rows: list[tuple[str, str, str, str]] = []  # (check, model, setting, value)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout` stops us: still print what we have
    try:
        measure_all(args, cuda, rows)
    finally:
        print_table(rows, cuda, time.time() - t_start)


def measure_all(args, cuda: bool, rows: list) -> None:
    configs = TINY if args.tiny else CONFIGS
    names = args.models or list(configs)
    vocab = configs[names[0]]["vocab_size"] if args.tiny else relevance_bench.QWEN_VOCAB
    for T in [16] if args.tiny else args.js_T:
        m = {
            kind: relevance_bench.measure(kind, T, vocab, "bfloat16", 256, torch.get_num_threads(), args.device)
            for kind in relevance_bench.KINDS
        }
        agree = relevance_bench.checksums_agree(m)
        rows.append(
            (
                "JS compiled vs eager vs naive: time",
                f"V={vocab}",
                f"T={T}",
                " vs ".join(f"{m[k]['seconds']:.3f}s" for k in ("compiled", "eager", "naive")),
            )
        )
        rows.append(
            (
                "JS compiled vs eager vs naive: peak extra memory",
                f"V={vocab}",
                f"T={T}",
                " vs ".join(f"{m[k]['peak_extra_mib']:.0f}" for k in ("compiled", "eager", "naive"))
                + f" MiB{'' if agree else ' (DISAGREE)'}",
            )
        )

    for name in names:
        bench = replay_overhead.parser().parse_args(
            [
                "--model",
                name,
                "--device",
                args.device,
                "--dtype",
                "bfloat16",
                "--batch",
                str(4 if args.tiny else args.batch),
                "--group-size",
                str(2 if args.tiny else args.group_size),
                "--replay-frac",
                "0.12",
                "0.21",
                "1.0",
                "--micro-batch",
                "4",
                "--repeats",
                "1" if args.tiny else "2",
                "--warmup",
                "0" if args.tiny else "1",
                "--clock",
                "wall" if cuda else "process",
            ]
            + (["--prompt-len", "32", "--response-len", "16", "--block-len", "4"] if args.tiny else [])
        )
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model = build(configs[name], args.device, torch.bfloat16)
        results = replay_overhead.run(bench, model=model)
        for r in results:
            setting = f"{r['shape']}, {r['frac']:.0%} of pairs"
            rows.append(("replay / GDPO actor work", name, setting, f"{r['replay'] / r['gdpo']:.1%}"))
            rows.append(("replay / floor", name, setting, f"{r['replay'] / r['floor']:.2f}"))
            if cuda:
                rows.append(
                    ("peak GPU memory in the replay (weights incl.)", name, setting, f"{r['replay_peak_gib']:.1f} GiB")
                )
        rows.append(
            (
                "max |q shared - q unshared| (bf16)",
                name,
                "4 requests",
                f"{shared_vs_unshared(model, configs[name]['vocab_size'], args.device, args.tiny):.2e}",
            )
        )
        if cuda and importlib.util.find_spec("flash_attn") is not None:
            try:  # the cache + mask-with-holes path under flash-attention's varlen kernel
                model.set_attn_implementation("flash_attention_2")
                value = f"{shared_vs_unshared(model, configs[name]['vocab_size'], args.device, args.tiny):.2e}"
            except Exception as exc:  # noqa: BLE001 - a check that reports, not one that stops the table
                value = f"error: {type(exc).__name__}: {str(exc)[:60]}"
            finally:
                model.set_attn_implementation("sdpa")
            rows.append(("max |q shared - q unshared| (bf16, flash_attention_2)", name, "4 requests", value))
        if cuda:
            peak = torch.cuda.max_memory_allocated() / 2**30
            rows.append(("peak GPU memory, all", name, "model + GDPO fwd/bwd + replay", f"{peak:.1f} GiB"))
        del model


def print_table(rows: list, cuda: bool, seconds: float) -> None:
    device_name = torch.cuda.get_device_name() if cuda else f"cpu ({torch.backends.cpu.get_cpu_capability()})"
    print(f"\n== GPU check: {device_name}, bf16, torch {torch.__version__}, {seconds:.0f}s ==", flush=True)
    if not rows:
        print("(nothing measured)")
        return
    widths = [max(len(r[i]) for r in rows + [("check", "model", "setting", "value")]) for i in range(4)]
    line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    print(line(("check", "model", "setting", "value")))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
