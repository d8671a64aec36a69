"""What the base model can learn on a task: sample it and measure, per reward, how often it passes and how often
it varies inside a prompt's group (a reward constant in its group has zero GDPO advantage and gives no signal).

    python -m mrtpo_openrlhf.study probe --task tool --data FILE [--prompts 64 --samples 8 --temperature 0.7]

Sampling and scoring are the diagnostics' (``diagnostics.runner.generate_samples`` / ``score``), i.e. the chat-
templated prompt and the task's own ``reward_func`` on ``prompt + decoded response``, as in training.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from mrtpo_openrlhf.core.settings import RUN_SETTINGS


def group_stats(groups: Sequence[Sequence[tuple[list[str], list[float]]]]) -> dict[str, Any]:
    """Per-reward pass rate and varying-group fraction.

    groups: one entry per prompt, each a list of (names, values) per sampled response. A reward counts for a
    group when every response of the group has it (names may differ across prompts, e.g. constraint ids).
    Returns {"rewards": {name: {pass_rate, groups, varying_frac}}, "groups": G,
             "multi_varying_frac": share of groups where >= 2 rewards vary,
             "varying_by_group": [sorted names that vary in group g]}.
    """
    passed = defaultdict(list)
    varying = defaultdict(list)
    multi = 0
    by_group: list[list[str]] = []
    for group in groups:
        by_name = defaultdict(list)
        for names, values in group:
            for name, value in zip(names, values):
                by_name[name].append(float(value))
        n_varying = 0
        for name, vals in by_name.items():
            if len(vals) != len(group):
                continue
            passed[name].extend(vals)
            is_varying = max(vals) != min(vals)
            varying[name].append(is_varying)
            n_varying += is_varying
        multi += n_varying >= 2
        by_group.append(
            sorted(name for name, vals in by_name.items() if len(vals) == len(group) and len(set(vals)) > 1)
        )
    rewards = {
        name: {
            "pass_rate": sum(passed[name]) / len(passed[name]),
            "groups": len(varying[name]),
            "varying_frac": sum(varying[name]) / len(varying[name]),
        }
        for name in sorted(varying)
    }
    return {
        "rewards": rewards,
        "groups": len(groups),
        "multi_varying_frac": multi / max(1, len(groups)),
        "varying_by_group": by_group,
    }


def correlations(rows: Sequence[dict[str, float]]) -> dict[str, float | None]:
    """Pearson r between every pair of keys (rewards, ``truncated``, ``length``) over the responses that have both.

    rows: one {name: value} per response; names may differ between responses (instruction following draws its
    constraints per prompt), so each pair uses the responses holding both keys (pairwise complete). Returns
    {"a~b": r}; None where a key is constant over those responses or fewer than 3 have both (r undefined)."""
    keys = sorted(set().union(*rows)) if rows else []
    out: dict[str, float | None] = {}
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            both = [(r[a], r[b]) for r in rows if a in r and b in r]
            if not both:
                continue
            n = len(both)
            ma, mb = sum(x for x, _ in both) / n, sum(y for _, y in both) / n
            va = sum((x - ma) ** 2 for x, _ in both)
            vb = sum((y - mb) ** 2 for _, y in both)
            cov = sum((x - ma) * (y - mb) for x, y in both)
            out[f"{a}~{b}"] = cov / (va * vb) ** 0.5 if n >= 3 and va > 0 and vb > 0 else None
    return out


# Named rule sets a probe is judged by (the issue that set them). window: a reward "moves" when its pass rate lies
# in it; saturated: a reward passing more often is not counted among the rewards that vary in a group;
# min_moving: how many rewards must move; multi_varying: the share of groups where at least two rewards vary;
# truncated: the largest truncated share; length_proxy: the largest |r| between a reward and the response length.
PROBE_RULES: dict[str, dict[str, Any]] = {
    "if-multi": {  # issue 45: multi-constraint instruction following
        "window": (0.10, 0.80),
        "saturated": 0.90,
        "min_moving": 6,
        "multi_varying": 0.50,
        "truncated": 0.10,
        "length_proxy": 0.5,
    },
}


def check_rules(result: dict[str, Any], rules: dict[str, Any]) -> dict[str, Any]:
    """Judge a probe ``result`` by ``rules`` (a ``PROBE_RULES`` entry): {"rules": ..., "checks": [{rule, value,
    passed}], "passed": all of them}. Each check's value is what the probe measured."""
    low, high = rules["window"]
    rates = {name: r["pass_rate"] for name, r in result["rewards"].items()}
    moving = sorted(name for name, rate in rates.items() if low <= rate <= high)
    saturated = {name for name, rate in rates.items() if rate > rules["saturated"]}
    groups = result["varying_by_group"]
    multi = sum(len(set(names) - saturated) >= 2 for names in groups) / max(1, len(groups))
    length_r = {
        pair: r
        for pair, r in (result.get("correlations") or {}).items()
        if r is not None and "length" in pair.split("~") and "truncated" not in pair.split("~")
    }
    worst = max(length_r.items(), key=lambda kv: abs(kv[1]), default=(None, 0.0))
    checks = [
        {
            "rule": f"at least {rules['min_moving']} rewards pass on {low:.0%}-{high:.0%} of responses",
            "value": moving,
            "passed": len(moving) >= rules["min_moving"],
        },
        {
            "rule": f"at least two rewards vary in {rules['multi_varying']:.0%} of groups or more "
            f"(a reward above {rules['saturated']:.0%} not counted: {sorted(saturated) or 'none'})",
            "value": multi,
            "passed": multi >= rules["multi_varying"],
        },
        {
            "rule": f"truncated at the new-token cap in under {rules['truncated']:.0%} of responses",
            "value": result["setup"]["truncated_frac"],
            "passed": result["setup"]["truncated_frac"] < rules["truncated"],
        },
        {
            "rule": f"no reward a length proxy (|r| with response length at most {rules['length_proxy']})",
            "value": {"pair": worst[0], "r": worst[1]},
            "passed": abs(worst[1]) <= rules["length_proxy"],
        },
    ]
    return {"rules": rules, "checks": checks, "passed": all(c["passed"] for c in checks)}


def sample_vllm(
    model_path: Path, rows: Sequence[dict], samples: int, max_new_tokens: int, temperature: float, seed: int
) -> list:
    """The diagnostics' ``Sample`` list drawn with vLLM (the rollout engine training uses), in row order."""
    import os

    from vllm import LLM, SamplingParams

    from mrtpo_openrlhf.diagnostics.runner import Sample, encode, template_prompt

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    llm = LLM(model=str(model_path), seed=seed, enforce_eager=True, max_model_len=2048)
    tokenizer = llm.get_tokenizer()
    prompts = [template_prompt(tokenizer, row["prompt"]) for row in rows]
    # no per-request seed: vLLM-cpu's sampler rejects it ("CPU Generator does not use offset"); the engine seed holds
    params = SamplingParams(n=samples, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens)
    outs = llm.generate([{"prompt_token_ids": encode(tokenizer, p)} for p in prompts], params)
    return [
        Sample(i, s, prompts[i], row["label"], list(o.outputs[s].token_ids))
        for i, (row, o) in enumerate(zip(rows, outs))
        for s in range(samples)
    ]


def probe(
    task: str,
    data: Path,
    model: str = "smollm2",
    prompts: int = 64,
    samples: int = 8,
    temperature: float = RUN_SETTINGS["cpu"].temperature,
    max_new_tokens: int = 96,
    seed: int = 0,
    backend: str = "auto",
    save_samples: Path | None = None,
) -> dict[str, Any]:
    """Sample ``prompts`` x ``samples`` responses from ``model`` and return ``group_stats`` plus the set-up.

    backend: ``vllm`` (the rollout engine; much faster on CPU), ``transformers``, or ``auto`` (vLLM if installed).
    save_samples: also write the samples as ``diagnose --responses`` rows (prompt, response, response_ids, label).
    """
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrtpo_openrlhf.diagnostics.runner import generate_samples, load_rows, resolve_model, score

    if samples < 2:
        raise ValueError("--samples must be >= 2: a group of one never varies")
    model_path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    rows = load_rows(Path(data), prompts)
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
    t0 = time.time()
    if backend == "vllm":
        drawn = sample_vllm(model_path, rows, samples, max_new_tokens, temperature, seed)
    else:
        lm = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
        drawn = generate_samples(lm, tokenizer, rows, samples, max_new_tokens, temperature, seed)
    groups: list[list[tuple[list[str], list[float]]]] = [[] for _ in rows]
    lengths, saved, flat = [], [], []
    for s in drawn:
        text = tokenizer.decode(s.response_ids, skip_special_tokens=False)
        vec = score(task, s.prompt, text, s.label)
        groups[s.prompt_index].append((vec.names, vec.values))
        lengths.append(len(s.response_ids))
        flat.append(
            {
                **dict(zip(vec.names, vec.values)),
                "truncated": float(len(s.response_ids) >= max_new_tokens),
                "length": float(len(s.response_ids)),
            }
        )
        saved.append(
            {
                "prompt": rows[s.prompt_index]["prompt"],
                "response": text,
                "response_ids": s.response_ids,
                "label": s.label,
            }
        )
    if save_samples is not None:
        from mrtpo_openrlhf.data.jsonl import write_jsonl

        write_jsonl(Path(save_samples), saved)
    out = group_stats(groups)
    out["correlations"] = correlations(flat)
    out["setup"] = {
        "task": task,
        "data": str(data),
        "model": model,
        "prompts": len(rows),
        "samples": samples,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "backend": backend,
        "mean_response_tokens": sum(lengths) / max(1, len(lengths)),
        "truncated_frac": sum(n >= max_new_tokens for n in lengths) / max(1, len(lengths)),
        "seconds": round(time.time() - t0, 1),
        "cpu": torch.backends.cpu.get_cpu_capability(),
    }
    return out


def format_table(result: dict[str, Any]) -> str:
    """Markdown table of one probe result."""
    s = result["setup"]
    lines = [
        f"{s['task']} ({Path(s['data']).name}, {s['prompts']} prompts x {s['samples']} samples, "
        f"T={s['temperature']}, {s['max_new_tokens']} new tokens; mean length {s['mean_response_tokens']:.0f}, "
        f"truncated {100 * s['truncated_frac']:.0f}%; >=2 rewards vary in "
        f"{100 * result['multi_varying_frac']:.0f}% of groups)",
        "",
        "| reward | pass rate | groups | varying in |",
        "|---|---|---|---|",
    ]
    for name, r in result["rewards"].items():
        lines.append(f"| {name} | {100 * r['pass_rate']:.1f}% | {r['groups']} | {100 * r['varying_frac']:.0f}% |")
    corr = result.get("correlations") or {}
    shown = {p: r for p, r in corr.items() if r is not None and (abs(r) >= 0.3 or "length" in p.split("~"))}
    if shown:
        lines += [
            "",
            "correlations over responses (Pearson r; with length, and |r| >= 0.3; all in the JSON): "
            + ", ".join(f"{pair} {r:+.2f}" for pair, r in shown.items()),
        ]
    judged = result.get("rules")
    if judged:
        lines += ["", f"rules {judged['name']}: {'passed' if judged['passed'] else 'FAILED'}"]
        lines += [f"- {'ok  ' if c['passed'] else 'FAIL'} {c['rule']}: {c['value']}" for c in judged["checks"]]
    return "\n".join(lines)


def write(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
