"""Replay cost against a GDPO step's actor work and against the replay's floor, on one model in one run.

A GDPO step on the actor is (at least) the experience maker's log-prob forward plus the PPO
forward+backward over the same sequences; MRTPO adds the replay of the (response, reward) pairs whose
advantage is non-zero (12-21% of pairs in the paper). The floor is the least work that replay needs:
one forward over the prefix the contexts share (per prompt: its responses all share the prompt), then
1 + K' forwards per replayed response over the block and response positions on that cache, logits at
response positions only, no padding and no JS.
Generation (vLLM) and the optimizer step are left out, so replay / GDPO is an upper bound on the
step-time overhead. Times are the best of ``--repeats``; the replay, the floor and the JS alone are timed in
turn within each repeat, so a slow spell of the machine hits all three alike. ``JS s`` is the JS distance
alone on the same number of (response, reward) pairs (random logits, the replay's kernel): the part of the
replay the floor leaves out.

Shapes: ``sql`` = prompt 1,024, K blocks of 64 appended at the end of the user turn (before a 5-token
chat suffix), response 256; ``if`` = prompt 256, K blocks of 24 inline (inserted at token 128),
response 512. The last line is a one-line summary for scripts, e.g.
``replay/floor 1.08 replay/GDPO 9.4% (tiny, SQL-like, 21% of pairs)``.

``--relevance js loggap js-contrast`` (or ``all``: every registered measure, ``core.relevance``) times each measure's
replay against the same floor and GDPO work in one run: loggap keeps no full-vocabulary logits and computes no JS;
js-contrast replays one more context per response (the null block, here ``block`` random tokens added after the
blocks). ``JS s`` is then the JS alone of the measure's pairs (js-contrast: + one per response), 0 for loggap.

    python benchmarks/replay_overhead.py --model tiny                    # tiny random Llama, minutes on CPU
    python benchmarks/replay_overhead.py --model smollm2 --gdpo-batch 4  # SmolLM2-135M
    python benchmarks/replay_overhead.py --model /path/to/Qwen2.5-Coder-3B-Instruct --device cuda --batch 64
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch

from mrtpo_openrlhf.core.relevance import DISTRIBUTIONS, RELEVANCE
from mrtpo_openrlhf.core.settings import DEFAULT_JS_KERNEL, DEFAULT_RELEVANCE, JS_KERNELS

SHAPES = {  # prompt, block length, insert position (negative: from the end), response
    "sql": dict(prompt=1024, block=64, insert=-5, response=256, label="SQL-like"),
    "if": dict(prompt=256, block=24, insert=128, response=512, label="IF-like"),
}


def load_model(name: str, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if name == "tiny":
        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=32000,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            max_position_embeddings=4096,
        )
        model = LlamaForCausalLM(cfg)
    else:
        if name == "smollm2":
            from mrtpo_openrlhf.models import ensure_smollm2

            name = str(ensure_smollm2())
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    model.config._attn_implementation = "sdpa"
    return model.to(device=device, dtype=dtype).eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


CLOCK = {"wall": time.perf_counter, "process": time.process_time}
clock = time.perf_counter


def time_it(fn, device: str, repeats: int, warmup: int = 1) -> float:
    """Best of ``repeats`` timed calls after ``warmup`` untimed ones."""
    return time_in_turn({"fn": fn}, device, repeats, warmup)["fn"]


def time_in_turn(fns: dict, device: str, repeats: int, warmup: int = 1) -> dict:
    """Best time of each of ``fns`` (name -> callable), timed one after another within each repeat."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            t0 = clock()
            fn()
            sync(device)
            best[name] = min(best[name], clock() - t0)
    return best


def js_alone(n_pairs: int, n_response: int, vocab: int, dtype: torch.dtype, device: str, kernel: str):
    """The JS of ``n_pairs`` (response, reward) pairs on random logits: what the replay adds to its forwards."""
    from mrtpo_openrlhf.core import js_relevance

    g = torch.Generator().manual_seed(2)
    full_cpu = torch.randn(n_response, vocab, generator=g) * 2  # drawn on the CPU: the same logits on every device
    full = full_cpu.to(device=device, dtype=dtype)
    minus = (full_cpu + torch.randn(n_response, vocab, generator=g)).to(device=device, dtype=dtype)

    def run():
        for _ in range(n_pairs):
            js_relevance(full, minus, kernel=kernel)

    return run


def gdpo_actor_work(model, seqs: torch.Tensor, n_response: int, micro_batch: int):
    """Log-prob forward + PPO forward/backward over ``seqs`` (N, L), full logits as upstream computes them."""

    def logprob_forward():
        with torch.no_grad():
            for s in seqs.split(micro_batch):
                model(input_ids=s).logits.float().log_softmax(-1)

    def train_forward_backward():
        model.train()
        for s in seqs.split(micro_batch):
            logits = model(input_ids=s).logits.float()
            logp = logits[:, :-1].log_softmax(-1).gather(-1, s[:, 1:, None]).squeeze(-1)
            (-logp[:, -n_response:].mean()).backward()
        model.zero_grad(set_to_none=True)
        model.eval()

    return logprob_forward, train_forward_backward


@dataclass
class FloorItem:
    prefix: list[int]
    branches: list[list[int]]  # tokens after the prefix + response[:-1], one per context of each response
    n_response: int


def floor_items(requests, prompt_of: list[int]) -> list[FloorItem]:
    """Per prompt, the prefix every context of its replayed responses shares, and every context's branch."""
    from mrtpo_openrlhf.core import shared_prefix_length

    by_prompt: dict[int, list] = {}
    for req, pid in zip(requests, prompt_of):
        by_prompt.setdefault(pid, []).append(req)
    items = []
    for reqs in by_prompt.values():
        ctxs = [
            (c, list(r.response_ids))
            for r in reqs
            for c in [list(r.full_context)] + [list(m) for m in r.minus_contexts.values()]
        ]
        p = shared_prefix_length([c for c, _ in ctxs])
        items.append(
            FloorItem(ctxs[0][0][:p], [c[p:] + resp[:-1] for c, resp in ctxs], max(len(resp) for _, resp in ctxs))
        )
    return items


@torch.no_grad()
def floor_work(model, items: list[FloorItem], micro_batch: int, device: str) -> int:
    """The least replay work: per ``micro_batch`` responses one prefix forward, then every branch on a copy
    of that cache, rows of equal length batched (no padding, so no masks), logits at response positions
    only; no JS. Returns the number of forwards."""
    from transformers import DynamicCache

    forwards = 0
    for s in range(0, len(items), micro_batch):
        group = items[s : s + micro_batch]
        by_prefix: dict[int, list[int]] = {}
        for j, it in enumerate(group):
            by_prefix.setdefault(len(it.prefix), []).append(j)
        caches: dict[int, tuple[list, int]] = {}  # position in group -> (layers, row in them)
        for plen, js in by_prefix.items():
            out = model(
                input_ids=torch.tensor([group[j].prefix for j in js], device=device), logits_to_keep=1, use_cache=True
            )
            forwards += 1
            layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
            for r, j in enumerate(js):
                caches[j] = (layers, r)
        rows: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}  # (prefix len, branch len) -> rows
        for j, it in enumerate(group):
            for b in it.branches:
                rows.setdefault((len(it.prefix), len(b)), []).append((j, b))
        for (plen, _), same in rows.items():
            for t in range(0, len(same), micro_batch):
                chunk = same[t : t + micro_batch]
                layers = caches[chunk[0][0]][0]
                sel = torch.tensor([caches[j][1] for j, _ in chunk], device=device)
                past = DynamicCache([(k.index_select(0, sel), v.index_select(0, sel)) for k, v in layers])
                ids = torch.tensor([b for _, b in chunk], device=device)
                pos = plen + torch.arange(ids.shape[1], device=device).expand_as(ids)
                keep = max(group[j].n_response for j, _ in chunk)
                model(input_ids=ids, position_ids=pos, past_key_values=past, use_cache=True, logits_to_keep=keep)
                forwards += 1
    return forwards


def make_requests(prompts, blocks, responses, insert_at, frac, n_rewards, group_size, g, null=None):
    """Random (response, reward) pairs to replay; response i answers prompt i // group_size; ``null``: the null
    block's ids, added after the blocks in each request's null context.

    Returns (number of pairs, requests, prompt index of each request)."""
    from mrtpo_openrlhf.core import request_from_ids

    n_pairs = len(responses) * n_rewards
    n = max(1, round(frac * n_pairs))
    per_row: dict[int, list[int]] = {}
    for j in torch.randperm(n_pairs, generator=g)[:n].tolist():
        i, k = divmod(j, n_rewards)
        per_row.setdefault(i, []).append(k)
    rows = sorted(per_row.items())
    reqs = [
        request_from_ids(prompts[i // group_size], blocks[i], responses[i], sorted(ks), insert_at, null_ids=null)
        for i, ks in rows
    ]
    return n, reqs, [i // group_size for i, _ in rows]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--shape", nargs="+", default=["sql", "if"], choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=16, help="responses per step")
    ap.add_argument(
        "--gdpo-batch",
        type=int,
        default=None,
        help="time the GDPO actor work on this many responses and scale to --batch (linear)",
    )
    ap.add_argument("--prompt-len", type=int, default=None, help="override the shape's prompt length")
    ap.add_argument("--response-len", type=int, default=None, help="override the shape's response length")
    ap.add_argument("--block-len", type=int, default=None, help="override the shape's block length")
    ap.add_argument(
        "--group-size",
        type=int,
        default=1,
        help="responses per prompt (GRPO's n_samples_per_prompt); 1: every response its own prompt",
    )
    ap.add_argument("--rewards", type=int, default=3)
    ap.add_argument("--replay-frac", type=float, nargs="+", default=[0.12, 0.21, 1.0])
    ap.add_argument("--summary-frac", type=float, default=0.21)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--clock",
        default="wall",
        choices=sorted(CLOCK),
        help="process: this process's CPU time (with --threads 1, robust on a shared CPU)",
    )
    ap.add_argument("--unshared", action="store_true", help="also time the replay without prefix sharing")
    ap.add_argument("--js-kernel", default=DEFAULT_JS_KERNEL, choices=JS_KERNELS, help="the replay's JS kernel")
    ap.add_argument(
        "--relevance",
        nargs="+",
        default=[DEFAULT_RELEVANCE],
        choices=[*RELEVANCE, "all"],
        help="relevance measures to time, each against the same floor and GDPO work (all: every registered one)",
    )
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run(args)


def run(args, model=None) -> list[dict]:
    """Prints the table and the summary line; returns one dict per (shape, fraction).

    ``model``: an already built model (``args.model`` is then only its name in the output).
    """
    from mrtpo_openrlhf.core import count_forwards, replay_relevance

    global clock
    clock = CLOCK[args.clock]
    timed = lambda fn: time_it(fn, args.device, args.repeats, args.warmup)  # noqa: E731

    if model is None:
        model = load_model(args.model, args.device, getattr(torch, args.dtype))
    vocab = model.config.vocab_size
    measures = list(RELEVANCE) if "all" in args.relevance else list(dict.fromkeys(args.relevance))
    results = []
    print(
        f"model={args.model} device={args.device} dtype={args.dtype} batch={args.batch} "
        f"group_size={args.group_size} K={args.rewards} "
        f"micro_batch={args.micro_batch} threads={torch.get_num_threads()} clock={args.clock} "
        f"js_kernel={args.js_kernel} cpu={torch.backends.cpu.get_cpu_capability()}"
    )
    for shape_name in args.shape:
        shape = SHAPES[shape_name]
        plen = args.prompt_len or shape["prompt"]
        rlen = args.response_len or shape["response"]
        blen = args.block_len or shape["block"]
        insert_at = plen + shape["insert"] if shape["insert"] < 0 else min(shape["insert"], plen)
        g = torch.Generator().manual_seed(0)
        ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
        prompts = [ids(plen) for _ in range(-(-args.batch // args.group_size))]
        responses = [ids(rlen) for _ in range(args.batch)]
        blocks = [[ids(blen) for _ in range(args.rewards)] for _ in range(args.batch)]
        full = [
            prompts[i // args.group_size][:insert_at] + sum(b, []) + prompts[i // args.group_size][insert_at:]
            for i, b in enumerate(blocks)
        ]
        n_gdpo = args.gdpo_batch or args.batch
        seqs = torch.tensor([f + r for f, r in zip(full[:n_gdpo], responses)], device=args.device)
        logp, train = gdpo_actor_work(model, seqs, rlen, args.micro_batch)
        scale = args.batch / n_gdpo
        t_gdpo = (timed(logp) + timed(train)) * scale
        print(
            f"\n{shape['label']}: prompt {plen} + {args.rewards} blocks of {blen} (at token {insert_at}), "
            f"response {rlen}"
        )
        print(
            f"GDPO actor work per step (log-prob forward + train fwd/bwd, {args.batch} responses"
            f"{'' if scale == 1 else f', timed on {n_gdpo} and scaled'}): {t_gdpo:.3f}s"
        )
        print(
            f"{'relevance':>11} | {'replayed pairs':>15} | {'fwd':>4} | {'replay s':>8} | {'unshared s':>10} | "
            f"{'floor s':>8} | {'JS s':>6} | {'replay/floor':>12} | {'(replay-JS)/floor':>17} | {'replay/GDPO':>11} | "
            f"{'unshared/GDPO':>13}"
        )
        n_pairs = args.batch * args.rewards
        null = torch.randint(10, vocab, (blen,), generator=torch.Generator().manual_seed(1)).tolist()
        for frac in args.replay_frac:
            n, with_null, prompt_of = make_requests(
                prompts, blocks, responses, insert_at, frac, args.rewards, args.group_size, g, null
            )  # every measure replays the same pairs; only a contrasting one runs the null contexts
            bare = [type(r)(r.full_context, r.response_ids, r.minus_contexts, r.joint_rewards) for r in with_null]
            for measure in measures:
                spec = RELEVANCE[measure]
                reqs = with_null if spec.null_context else bare

                def replay(share, reqs=reqs, measure=measure):
                    return replay_relevance(
                        model,
                        reqs,
                        num_rewards=args.rewards,
                        micro_batch_size=args.micro_batch,
                        share_prefix=share,
                        js_kernel=args.js_kernel,
                        relevance=measure,
                    )

                cuda = args.device.startswith("cuda")
                dtype = next(model.parameters()).dtype
                js_alone(1, rlen, vocab, dtype, args.device, args.js_kernel)()  # a compile is once per process: untimed
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                    replay(True)
                replay_peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
                items = floor_items(bare, prompt_of)  # the floor of the JS replay, whatever the measure
                n_js = (n + len(reqs) * spec.null_context) if spec.output == DISTRIBUTIONS else 0
                fns = {
                    "replay": lambda: replay(True),
                    "floor": lambda: floor_work(model, items, args.micro_batch, args.device),
                    "js": js_alone(n_js, rlen, vocab, dtype, args.device, args.js_kernel),
                }
                if args.unshared:
                    fns["unshared"] = lambda: replay(False)
                t = time_in_turn(fns, args.device, args.repeats, args.warmup)
                t_replay, t_floor, t_js = t["replay"], t["floor"], t["js"]
                t_unshared = t.get("unshared", float("nan"))
                row = dict(
                    relevance=measure,
                    shape=shape["label"],
                    frac=frac,
                    pairs=n,
                    replay=t_replay,
                    unshared=t_unshared,
                    floor=t_floor,
                    js=t_js,
                    gdpo=t_gdpo,
                    forwards=count_forwards(reqs, args.micro_batch),
                    replay_peak_gib=replay_peak,
                )
                results.append(row)
                print(
                    f"{measure:>11} | {n:>6}/{n_pairs:<4} {frac:>4.0%} | {row['forwards']:>4} | {t_replay:>8.3f} | "
                    f"{t_unshared:>10.3f} | {t_floor:>8.3f} | {t_js:>6.3f} | {t_replay / t_floor:>12.2f} | "
                    f"{(t_replay - t_js) / t_floor:>17.2f} | {t_replay / t_gdpo:>11.1%} | "
                    f"{t_unshared / t_gdpo:>13.1%}"
                )
    if args.device.startswith("cuda"):
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    pick = [r for r in results if abs(r["frac"] - args.summary_frac) < 1e-9] or results
    s = pick[0]
    print(
        f"replay/floor {s['replay'] / s['floor']:.2f} replay/GDPO {s['replay'] / s['gdpo']:.1%} "
        f"({args.model}, {s['shape']}, {s['frac']:.0%} of pairs)"
        + ("" if s["relevance"] == DEFAULT_RELEVANCE else f", relevance {s['relevance']}")
    )
    return results


if __name__ == "__main__":
    main()
