"""GPU check on a random-initialised Qwen2.5-Coder-7B (its published config below, nothing downloaded): what the CPU
cannot show. Needs only PyTorch and transformers; run through ``benchmarks/gpu_check.sh`` (under 8 minutes on one
H200). Prints one table and exits 1 when a check fails (its row says FAIL and why).

1. Compiled JS on the device against an fp64 reference: logit rows at a trained model's spread, 1e-5 to 1e-1
   apart, a masked (-inf) vocabulary tail, T from 1 to 4,095 positions; fails on a compile after the first one
   (a recompile per shape) or a silent eager fallback (``relevance._compile_failed``).
2. The paper-shape memory stress: 2,048-token prompts with 3 appended 128-token blocks, 2,048-token responses, groups
   of 8 responses, 100% of pairs replayed, micro-batch 4 and 8 (and 8 with ``--algo.mrtpo.replay_logits fp32``). The
   replay's peak minus what was allocated before
   it (the weights) must fit the headroom ``--train.colocate_all`` leaves (``colocate_headroom``).
3. The fp32 reference: shared vs unshared replay in fp32 with the logits scaled to a trained model's spread, within
   ``FP32_TOLERANCE`` (a larger gap is a mask, position or cache bug that bf16's ~1e-2 hides); the same in bf16,
   |q bf16 - q fp32|, the null pair of ``benchmarks/q_precision.py`` (full against itself in another batch
   composition) in bf16 with and without fp32 logits, and bf16 with flash-attention 2 ("skipped" when flash-attn
   is not installed).
4. Replay / GDPO actor work and replay / floor (SQL-like shape, 21% of pairs, groups of 8): the cost on the device.

Left to the CPU (tests/core, benchmarks/relevance.py, benchmarks/replay_overhead.py): JS speed and memory of the
kernels, the IF-like shape, other fractions of pairs, the 3B model.

    bash benchmarks/gpu_check.sh                         # one GPU
    bash benchmarks/gpu_check.sh --tiny --device cpu     # smoke run with tiny shapes (tests/benchmarks)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import signal
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import q_precision  # noqa: E402
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

# Published config.json values of Qwen/Qwen2.5-Coder-7B-Instruct (architecture fields).
QWEN_7B = dict(
    _QWEN2,
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    tie_word_embeddings=False,
)
TINY = dict(
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
MODEL_NAME = {False: "qwen2.5-coder-7b", True: "qwen2-tiny"}  # by --tiny
TOKENIZER_VOCAB_7B = 151665  # Qwen2.5's tokenizer: the embedding's last 399 rows are never sampled (masked tail)

# A trained model's logit spread: SmolLM2-135M-Instruct on the bundled SQL prompts, std over the vocabulary
# averaged over response positions (benchmarks/q_precision.py prints it; docs/cpu.md).
TRAINED_LOGIT_STD = 3.2
FP32_TOLERANCE = 1e-5  # max |q shared - q unshared| in fp32
JS_GAPS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)  # std of the noise between the two rows' logits
# 1% of the distance, plus fp32's floor: log-softmax values of |log p| ~ 10 carry ~1e-6 rounding, which alone gives
# q ~ 1e-7 (rows 1e-5 apart have q ~ 1e-6 at V = 512, ~1e-5 at V = 152k; the expm1 = exp - 1 bug was off by 3e-5)
JS_RTOL, JS_ATOL = 1e-2, 2e-7

# What stays on each GPU during the replay under --train.colocate_all (vLLM asleep, actor and reference awake),
# per parameter over N GPUs with ZeRO-3: actor bf16 shard + bf16 grad shard + fp32 master and Adam m, v (2+2+12 B),
# reference bf16 shard (2 B); plus ZeRO-3's gathered layers (stage3_max_live_parameters = 1e9, bf16), vLLM asleep
# (level 1: weights offloaded, KV cache freed; its CUDA graphs and context stay) and the other processes' CUDA
# contexts and allocator slack.
ZERO3_LIVE_BYTES = 2 * 10**9
VLLM_ASLEEP_BYTES = 3 << 30
CONTEXTS_BYTES = 3 << 30


def colocate_headroom(total_bytes: int, n_params: int, num_gpus: int) -> int:
    """Bytes the replay may use on one GPU of a ``colocate_all`` node (see the constants above)."""
    resident = (16 + 2) * n_params / num_gpus + ZERO3_LIVE_BYTES + VLLM_ASLEEP_BYTES + CONTEXTS_BYTES
    return int(total_bytes - resident)


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


def _ids(g: torch.Generator, vocab: int):
    return lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()


def probe_requests(vocab: int, tiny: bool):
    """A few SQL-like (blocks at the end) and inline (blocks inside the prompt) requests of different lengths."""
    from mrtpo_openrlhf.core import request_from_ids

    ids = _ids(torch.Generator().manual_seed(1), vocab)
    plen, blen, rlen = (24, 4, 8) if tiny else (512, 32, 128)
    return [
        request_from_ids(
            ids(plen + 7 * i),
            [ids(blen), ids(blen + i), ids(blen)],
            ids(rlen + 3 * i),
            [0, 1, 2],
            insert_at=(plen - 5) if i % 2 else plen // 2,
        )
        for i in range(4)
    ]


class LogitScale:
    """Scales the model's logits (a forward hook on the output embedding) so their spread over the vocabulary is
    ``target_std``: a random model's near-uniform distributions would hide what a trained model's peaked ones show."""

    def __init__(self, model, target_std: float, probe):
        self.factor = 1.0
        head = model.get_output_embeddings()
        self.handle = head.register_forward_hook(lambda _m, _i, out: out * self.factor)
        ids = torch.tensor([list(probe.full_context) + list(probe.response_ids)], device=model.device)
        with torch.no_grad():
            logits = model(input_ids=ids, logits_to_keep=len(probe.response_ids)).logits.float()
        self.factor = target_std / float(logits.std(-1).mean())

    def remove(self) -> None:
        self.handle.remove()


def q_pair(model, reqs, device: str):
    """(q shared, q unshared) of ``reqs`` with this model as it is."""
    from mrtpo_openrlhf.core import replay_relevance

    q, _ = replay_relevance(model, reqs, num_rewards=3, device=device)
    q_ref, _ = replay_relevance(model, reqs, num_rewards=3, device=device, share_prefix=False)
    return q, q_ref


def fp64_js(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The JS distance (base 2) of softmax rows, in float64 from the given values: (N, V) x 2 -> (N,)."""
    la, lb = torch.log_softmax(a.double(), -1), torch.log_softmax(b.double(), -1)
    lm = torch.logaddexp(la, lb) - math.log(2.0)
    pa, pb = la.exp(), lb.exp()
    terms = torch.where(pa > 0, pa * (la - lm), 0.0) + torch.where(pb > 0, pb * (lb - lm), 0.0)
    return (0.5 * terms.sum(-1) / math.log(2.0)).clamp_min(0.0).sqrt()


def js_check(device: str, tiny: bool, rows: list, failures: list) -> None:
    from torch._dynamo.utils import counters

    from mrtpo_openrlhf.core import js_relevance, relevance

    vocab = TINY["vocab_size"] if tiny else QWEN_7B["vocab_size"]
    live = vocab - 12 if tiny else TOKENIZER_VOCAB_7B
    lengths = (1, 2, 17, 255, 300) if tiny else (1, 2, 255, 256, 257, 1000, 4095)
    g = torch.Generator(device=device).manual_seed(3)
    base = torch.randn(max(lengths), vocab, generator=g, device=device) * TRAINED_LOGIT_STD
    base[:, live:] = float("-inf")  # the masked tail: never sampled, probability exactly 0 in both rows
    graphs_after_first = None
    for gap in JS_GAPS:
        other = base + torch.randn(base.shape, generator=g, device=device) * gap
        worst = 0.0
        for T in lengths:
            q = js_relevance(base[:T], other[:T], kernel="compiled")
            if graphs_after_first is None:
                graphs_after_first = counters["stats"]["unique_graphs"]
            ref = torch.cat([fp64_js(base[s : min(s + 256, T)], other[s : min(s + 256, T)]) for s in range(0, T, 256)])
            err = (q.double() - ref).abs() / (JS_RTOL * ref + JS_ATOL)
            worst = max(worst, float(err.max()))
        ok = worst <= 1.0
        if not ok:
            failures.append(f"compiled JS at gap {gap:g}")
        rows.append(
            (
                "compiled JS vs fp64 (error / tolerance)",
                f"V={vocab}, tail masked",
                f"gap {gap:g}, T={lengths[0]}..{lengths[-1]}",
                f"{worst:.2f}{'' if ok else ' FAIL'}",
            )
        )
    graphs = counters["stats"]["unique_graphs"]
    eager = relevance._compile_failed.get(torch.device(device).type)
    value = f"{graphs} graph(s), {graphs - graphs_after_first} recompiles"
    if eager or graphs - graphs_after_first or graphs < 1:
        failures.append("JS kernel compile")
        value += f" FAIL{f': eager fallback ({eager})' if eager else ''}"
    rows.append(("compiled JS: compiles", f"V={vocab}", f"{len(JS_GAPS) * len(lengths)} calls", value))


def stress_requests(tiny: bool, vocab: int, groups: int = 2, group_size: int = 8):
    """Paper shape: groups of ``group_size`` responses per prompt, 3 blocks appended before a 5-token chat suffix,
    every pair replayed."""
    from mrtpo_openrlhf.core import request_from_ids

    plen, blen, rlen = (48, 4, 16) if tiny else (2048, 128, 2048)
    ids = _ids(torch.Generator().manual_seed(4), vocab)
    reqs = []
    for _ in range(groups):
        prompt = ids(plen)
        for _ in range(group_size):
            reqs.append(request_from_ids(prompt, [ids(blen) for _ in range(3)], ids(rlen), [0, 1, 2], plen - 5))
    return reqs, (plen, blen, rlen)


def memory_stress(model, device: str, tiny: bool, num_gpus: int, rows: list, failures: list) -> None:
    from mrtpo_openrlhf.core import replay_relevance

    cuda = device.startswith("cuda")
    reqs, (plen, blen, rlen) = stress_requests(tiny, model.config.vocab_size)
    n_params = sum(p.numel() for p in model.parameters())
    headroom = (
        colocate_headroom(torch.cuda.get_device_properties(device).total_memory, n_params, num_gpus) if cuda else 0
    )
    for mbs, fp32_head in ((4, False), (8, False), (8, True)):
        setting = f"{len(reqs)} responses (groups of 8) x 3 pairs, micro-batch {mbs}"
        setting += ", fp32 logits" if fp32_head else ""
        if cuda:
            torch.cuda.empty_cache()
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        start = time.time()
        q, _ = replay_relevance(model, reqs, num_rewards=3, micro_batch_size=mbs, device=device, logits_fp32=fp32_head)
        seconds = time.time() - start
        if not torch.isfinite(q).all():
            failures.append(f"memory stress ({setting}): non-finite q")
        if cuda:
            extra = torch.cuda.max_memory_allocated(device) - before
            ok = extra <= headroom
            if not ok:
                failures.append(f"memory stress ({setting})")
            value = (
                f"{extra / 2**30:.1f} GiB of {headroom / 2**30:.1f} GiB headroom ({num_gpus} GPUs), "
                f"{seconds:.1f}s{'' if ok else ' FAIL'}"
            )
        else:
            value = f"not measured on {device}, {seconds:.1f}s"
        rows.append(
            (f"replay peak - weights: prompt {plen} + 3x{blen}, response {rlen}", MODEL_NAME[tiny], setting, value)
        )


def fp32_reference(model, device: str, tiny: bool, rows: list, failures: list) -> None:
    """Shared vs unshared in fp32 at a trained model's logit spread; then bf16 (the null pair of
    benchmarks/q_precision.py too, with and without fp32 logits), and bf16 with flash-attention."""
    from mrtpo_openrlhf.core.replay import fp32_logits

    reqs = probe_requests(model.config.vocab_size, tiny)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (TF32 would round to 10 bits)
    torch.backends.cudnn.allow_tf32 = False
    model.float()
    scale = LogitScale(model, TRAINED_LOGIT_STD, reqs[0])
    try:
        q32, q32_ref = q_pair(model, reqs, device)
        gap = float((q32 - q32_ref).abs().max())
        ok = gap <= FP32_TOLERANCE
        if not ok:
            failures.append("fp32 shared vs unshared")
        setting = f"4 requests, logit std {TRAINED_LOGIT_STD}"
        rows.append(
            (
                "max |q shared - q unshared| (fp32)",
                MODEL_NAME[tiny],
                setting,
                f"{gap:.2e} (limit {FP32_TOLERANCE:g}){'' if ok else ' FAIL'}",
            )
        )
        model.to(torch.bfloat16)
        q16, q16_ref = q_pair(model, reqs, device)
        mask = q32_ref > 0
        diff = (q16 - q32)[mask].abs()
        rows.append(
            ("max |q shared - q unshared| (bf16)", MODEL_NAME[tiny], setting, f"{(q16 - q16_ref).abs().max():.2e}")
        )
        rows.append(
            (
                "|q bf16 - q fp32| (shared) median / p99",
                MODEL_NAME[tiny],
                setting,
                f"{diff.median():.2e} / {diff.quantile(0.99):.2e} (mean q fp32 {q32[mask].mean():.3f})",
            )
        )
        real = float(q16[mask].mean())
        for fp32_head in (False, True):
            with fp32_logits(model) if fp32_head else contextlib.nullcontext():
                null = q_precision.null_q(model, reqs, 4, 0, device)
            rows.append(
                (
                    f"null pair q / mean real q (bf16{', fp32 logits' if fp32_head else ''})",
                    MODEL_NAME[tiny],
                    setting,
                    f"{float(null.mean()) / real:.1%} (p99 null q {float(null.quantile(0.99)):.2e})",
                )
            )
        flash = "max |q shared - q unshared| (bf16, flash_attention_2)"
        if not device.startswith("cuda") or importlib.util.find_spec("flash_attn") is None:
            rows.append(
                (
                    flash,
                    MODEL_NAME[tiny],
                    setting,
                    "skipped (flash-attn not installed: scripts/install_gpu.sh builds it where nvcc is present)"
                    if device.startswith("cuda")
                    else f"skipped (flash-attn needs CUDA; device {device})",
                )
            )
        else:
            try:  # the cache + mask-with-holes path under flash-attention's varlen kernel
                model.set_attn_implementation("flash_attention_2")
                qf, qf_ref = q_pair(model, reqs, device)
                value = f"{(qf - qf_ref).abs().max():.2e}"
            except Exception as exc:  # noqa: BLE001 - a check that reports, not one that stops the table
                value = f"error: {type(exc).__name__}: {str(exc)[:60]}"
            finally:
                model.set_attn_implementation("sdpa")
            rows.append((flash, MODEL_NAME[tiny], setting, value))
    finally:
        scale.remove()


def replay_cost(model, args, cuda: bool, rows: list) -> None:
    """Replay / GDPO actor work with gradient checkpointing on, as the paper's runs train
    (``--actor.gradient_checkpointing_enable`` in examples/scripts/_launch_gpu.sh): without it the random 7B's
    forward and backward peaked near 75-76 GiB by an activation estimate, 3 GiB under an 80 GB H100's limit. Out of
    memory anyway, the rows say so (skipped, with the free memory) and the rest of the table still runs."""
    setting = "SQL-like, 21% of pairs, gradient checkpointing"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        results = _replay_cost_results(model, args, cuda)
    except torch.OutOfMemoryError as exc:
        free = torch.cuda.mem_get_info()[0] / 2**30 if cuda else float("nan")
        why = f"skipped (CUDA out of memory, {free:.1f} GiB free after it: {str(exc).splitlines()[0][:80]})"
        for check in ("replay / GDPO actor work", "replay / floor"):
            rows.append((check, MODEL_NAME[args.tiny], setting, why))
        return
    finally:
        model.gradient_checkpointing_disable()
        if cuda:
            torch.cuda.empty_cache()
    for r in results:
        setting = f"{r['shape']}, {r['frac']:.0%} of pairs, gradient checkpointing"
        rows.append(("replay / GDPO actor work", MODEL_NAME[args.tiny], setting, f"{r['replay'] / r['gdpo']:.1%}"))
        rows.append(("replay / floor", MODEL_NAME[args.tiny], setting, f"{r['replay'] / r['floor']:.2f}"))


def _replay_cost_results(model, args, cuda: bool) -> list[dict]:
    bench = replay_overhead.parser().parse_args(
        [
            "--model",
            MODEL_NAME[args.tiny],
            "--device",
            args.device,
            "--dtype",
            "bfloat16",
            "--shape",
            "sql",
            "--batch",
            str(4 if args.tiny else args.batch),
            "--group-size",
            str(2 if args.tiny else args.group_size),
            "--replay-frac",
            "0.21",
            "--micro-batch",
            "4",
            "--repeats",
            "1",
            "--warmup",
            "0" if args.tiny else "1",
            "--clock",
            "wall" if cuda else "process",
        ]
        + (["--prompt-len", "32", "--response-len", "16", "--block-len", "4"] if args.tiny else [])
    )
    return replay_overhead.run(bench, model=model)


def replay_cost_by_measure(model, args, cuda: bool, rows: list) -> None:
    """One replay / GDPO and replay / floor row per relevance measure (``core.relevance``), the same pairs each."""
    bench = replay_overhead.parser().parse_args(
        ["--model", MODEL_NAME[args.tiny], "--device", args.device, "--dtype", "bfloat16", "--shape", "sql",
         "--batch", str(4 if args.tiny else args.batch), "--group-size", str(2 if args.tiny else args.group_size),
         "--replay-frac", "0.21", "--micro-batch", "4", "--repeats", "1", "--warmup", "0" if args.tiny else "1",
         "--clock", "wall" if cuda else "process", "--relevance", "all"]
        + (["--prompt-len", "32", "--response-len", "16", "--block-len", "4"] if args.tiny else [])
    )  # fmt: skip
    for r in replay_overhead.run(bench, model=model):
        setting = f"{r['shape']}, {r['frac']:.0%} of pairs, relevance {r['relevance']}"
        rows.append(("replay / GDPO actor work", MODEL_NAME[args.tiny], setting, f"{r['replay'] / r['gdpo']:.1%}"))
        rows.append(("replay / floor", MODEL_NAME[args.tiny], setting, f"{r['replay'] / r['floor']:.2f}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny model and shapes (a smoke run, any device)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=32, help="responses in the replay-cost row")
    ap.add_argument("--group-size", type=int, default=8, help="responses per prompt (GRPO's n_samples_per_prompt)")
    ap.add_argument("--num-gpus", type=int, default=8, help="GPUs the ZeRO-3 shards spread over (headroom)")
    args = ap.parse_args()
    t_start = time.time()
    cuda = args.device.startswith("cuda")
    rows: list[tuple[str, str, str, str]] = []  # (check, model, setting, value)
    failures: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout` stops us: still print what we have
    try:
        js_check(args.device, args.tiny, rows, failures)
        model = build(TINY if args.tiny else QWEN_7B, args.device, torch.bfloat16)
        memory_stress(model, args.device, args.tiny, args.num_gpus, rows, failures)
        replay_cost(model, args, cuda, rows)
        replay_cost_by_measure(model, args, cuda, rows)
        fp32_reference(model, args.device, args.tiny, rows, failures)
    finally:
        print_table(rows, cuda, time.time() - t_start)
    if failures:
        print(f"FAILED: {', '.join(failures)}")
        sys.exit(1)


def print_table(rows: list, cuda: bool, seconds: float) -> None:
    device_name = torch.cuda.get_device_name() if cuda else f"cpu ({torch.backends.cpu.get_cpu_capability()})"
    print(f"\n== GPU check: {device_name}, torch {torch.__version__}, {seconds:.0f}s ==", flush=True)
    if not rows:
        print("(nothing measured)")
        return
    widths = [max(len(r[i]) for r in rows + [("check", "model", "setting", "value")]) for i in range(4)]
    line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    print(line(("check", "model", "setting", "value")))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r), flush=True)
    unmeasured = [r for r in rows if r[3].startswith(("skipped", "not measured"))]
    if unmeasured:  # a row that measured nothing is named with its reason, not left for the reader to spot
        print(f"{len(unmeasured)} row(s) measured nothing:")
        for r in unmeasured:
            print(f"  {r[0]} ({r[2]}): {r[3]}")


if __name__ == "__main__":
    main()
