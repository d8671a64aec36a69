"""q's bf16 noise floor: the same SmolLM2-135M responses replayed in fp32 and in bf16, plus a null pair.

The replay computes JS in fp32 but from the model's logits, in bf16 on GPUs, and the ``full`` and ``minus_k``
rows of a pair run in different batch compositions and pad widths. This replays the same sampled responses
through the training path (``core.request_for_rollout`` -> ``core.replay_relevance``, every pair with a block,
micro-batch 4) with the model in fp32 and in bf16 and reports:
- median and p99 of |q_bf16 - q_fp32| over the response tokens of the replayed pairs;
- the Spearman rank correlation of the credit weights (``core.credit_weights``, beta 0.5), pooled and per pair;
- a null pair: each response's ``full`` context against itself, placed in another batch composition (the same
  requests reversed, micro-batch 3: other batch-mates, other pad widths) through ``core.replay.replay_forwards``
  (the forwards ``replay_relevance`` runs) and ``core.js_relevance``; its mean q as a fraction of the mean real q.

Responses are sampled once (fp32, temperature 1) and saved (``--responses``), so every run replays the same ones.

    flock /tmp/cpu-heavy.lock python benchmarks/q_precision.py                 # ~7 min on 2 shared cores
    python benchmarks/q_precision.py --logits-fp32                             # the replay's last layer in fp32
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import torch

from mrtpo_openrlhf.core import credit_weights, js_relevance, replay_relevance, request_for_rollout
from mrtpo_openrlhf.core.replay import fp32_logits, replay_forwards
from mrtpo_openrlhf.core.settings import DEFAULT_BLOCK_SEPARATOR
from mrtpo_openrlhf.diagnostics.runner import encode, generate_samples, score, template_prompt
from mrtpo_openrlhf.evaluation.generation import resolve_model
from mrtpo_openrlhf.tasks import get_task

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESPONSES = REPO / "benchmarks" / "data" / "q_precision_sql.jsonl"


def load_or_sample(model, tokenizer, path: Path, rows: int, samples: int, max_new_tokens: int) -> list[dict]:
    if path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    data = get_task("sql").cpu_train_data_path()
    table = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()][:rows]
    out = [
        {"prompt": s.prompt, "label": s.label, "response_ids": s.response_ids}
        for s in generate_samples(model, tokenizer, table, samples, max_new_tokens, temperature=1.0, seed=0)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
    return out


def build_requests(tokenizer, rows: list[dict]):
    """One request per response, every reward with a block, built as the experience maker builds them."""
    requests = []
    for row in rows:
        prompt = template_prompt(tokenizer, row["prompt"])
        text = tokenizer.decode(row["response_ids"], skip_special_tokens=False)
        vec = score("sql", prompt, text, row["label"])
        blocks = [it.block for it in vec.items]
        ks = [k for k, b in enumerate(blocks) if b]
        req, _ = request_for_rollout(
            tokenizer, prompt, encode(tokenizer, prompt), blocks, row["response_ids"], ks, DEFAULT_BLOCK_SEPARATOR,
            spans=vec.spans,
        )  # fmt: skip
        requests.append(req)
    return requests


def pair_mask(requests, K: int, T: int) -> torch.Tensor:
    """(B, K, T) bool: response tokens of the pairs that were replayed (a minus context that differs)."""
    mask = torch.zeros((len(requests), K, T), dtype=torch.bool)
    for i, req in enumerate(requests):
        for k, ctx in req.minus_contexts.items():
            if list(ctx) != list(req.full_context):
                mask[i, k, : len(req.response_ids)] = True
    return mask


def full_logits(model, requests, micro_batch: int, pad_id: int, device) -> dict[int, torch.Tensor]:
    """Each request's ``full`` response logits, as the replay computes them in this batch composition."""
    out = {}
    for rows in replay_forwards(model, requests, micro_batch, pad_id, torch.device(device), share_prefix=True):
        for job, logits in rows:
            if job.reward is None:
                out[job.request] = logits.clone()
    return out


def null_q(model, requests, micro_batch: int, pad_id: int, device="cpu") -> torch.Tensor:
    """Per response token, q of ``full`` against itself run in another batch composition (reversed, mbs - 1)."""
    a = full_logits(model, requests, micro_batch, pad_id, device)
    n = len(requests)
    b_rev = full_logits(model, list(reversed(requests)), max(1, micro_batch - 1), pad_id, device)
    qs = [js_relevance(a[i], b_rev[n - 1 - i]).cpu() for i in sorted(a)]
    return torch.cat(qs) if qs else torch.zeros(0)


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x.double().numpy(), y.double().numpy()).statistic)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--responses", type=Path, default=DEFAULT_RESPONSES, help="saved responses (sampled if absent)")
    ap.add_argument("--rows", type=int, default=6, help="SQL prompts to sample from (when sampling)")
    ap.add_argument("--samples", type=int, default=4, help="responses per prompt (when sampling)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--limit", type=int, default=8, help="replay only the first N saved responses (0: all)")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--logits-fp32", action="store_true", help="the bf16 replay's last layer (lm_head) in fp32")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    path = resolve_model("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    m32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    rows = load_or_sample(m32, tokenizer, args.responses, args.rows, args.samples, args.max_new_tokens)
    requests = [r for r in build_requests(tokenizer, rows[: args.limit or None]) if r.minus_contexts]
    print(f"[{time.time() - t0:.0f}s] {len(requests)} requests", file=sys.stderr, flush=True)
    K = 1 + max(k for r in requests for k in r.rewards)
    T = max(len(r.response_ids) for r in requests)
    mask = pair_mask(requests, K, T)
    m16 = copy.deepcopy(m32).to(torch.bfloat16)
    kw = dict(num_rewards=K, micro_batch_size=args.micro_batch, pad_token_id=pad)

    results = {}
    for name, model in (("fp32", m32), ("bf16", m16)):
        start = time.time()
        fp32_head = args.logits_fp32 and name == "bf16"
        q, _ = replay_relevance(model, requests, **kw, logits_fp32=fp32_head)
        print(f"[{time.time() - t0:.0f}s] {name} replay done", file=sys.stderr, flush=True)
        with fp32_logits(model) if fp32_head else contextlib.nullcontext():
            nq = null_q(model, requests, args.micro_batch, pad)
        print(f"[{time.time() - t0:.0f}s] {name} null pair done", file=sys.stderr, flush=True)
        results[name] = {"q": q, "null": nq, "s": time.time() - start}

    q32, q16 = results["fp32"]["q"], results["bf16"]["q"]
    diff = (q16 - q32).abs()[mask]
    w32 = credit_weights(q32, mask, 0.5)
    w16 = credit_weights(q16, mask, 0.5)
    per_pair = [spearman(w32[i, k][mask[i, k]], w16[i, k][mask[i, k]]) for i, k in mask.any(-1).nonzero().tolist()]
    per_pair = torch.tensor([r for r in per_pair if r == r])
    spread = logit_spread(m32, requests[0])
    lines = [
        f"CPU: {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        f"SmolLM2-135M-Instruct, {len(requests)} SQL responses ({args.responses.name}), {int(mask.any(-1).sum())} "
        f"pairs, {int(mask.sum())} pair tokens; micro-batch {args.micro_batch}; bf16 last layer "
        f"{'fp32 (--logits-fp32)' if args.logits_fp32 else 'bf16'}",
        f"logit spread of the model (one response): std {spread[0]:.2f}, max - median {spread[1]:.1f}",
        f"mean real q: fp32 {q32[mask].mean():.4f}, bf16 {q16[mask].mean():.4f}",
        f"|q_bf16 - q_fp32|: median {diff.median():.4f}, p99 {diff.quantile(0.99):.4f}, max {diff.max():.4f}",
        f"Spearman of the weights (beta 0.5): pooled {spearman(w32[mask], w16[mask]):.3f}, "
        f"per pair median {per_pair.median():.3f} (min {per_pair.min():.3f})",
    ]
    for name in ("fp32", "bf16"):
        nq, real = results[name]["null"], results[name]["q"][mask].mean()
        lines.append(
            f"null pair ({name}): mean q {nq.mean():.4f} = {nq.mean() / real:.1%} of the mean real q, "
            f"p99 {nq.quantile(0.99):.4f}, exactly 0 on {(nq == 0).float().mean():.0%} of tokens"
        )
    lines.append(
        f"time: fp32 {results['fp32']['s']:.0f}s, bf16 {results['bf16']['s']:.0f}s, total {time.time() - t0:.0f}s"
    )
    print("\n".join(lines), flush=True)
    return 0


def logit_spread(model, req) -> tuple[float, float]:
    """(std over the vocabulary, max - median), averaged over the response positions of one ``full`` context."""
    ids = torch.tensor([list(req.full_context) + list(req.response_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids, logits_to_keep=len(req.response_ids)).logits[0].float()
    return float(logits.std(-1).mean()), float((logits.max(-1).values - logits.median(-1).values).mean())


if __name__ == "__main__":
    sys.exit(main())
