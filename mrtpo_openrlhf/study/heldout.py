"""The study's primary endpoint: a checkpoint scored on unseen prompts, right after its run.

    python -m mrtpo_openrlhf.study heldout CONFIG --model runs/study/<name>/<arm>/seed<k>/model --out heldout.json

Samples ``heldout_samples`` responses to each of the first ``heldout_prompts`` rows of the config's ``heldout`` file
with vLLM (the rollout engine) at the study's temperature and new-token cap, and scores each through the task's own
``reward_func`` on ``prompt + decoded response``, as in training (``study.probe``'s sampling and scoring). The
output is small and committed with the run; the checkpoint is not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

HELDOUT = "heldout.json"
HELDOUT_SAMPLE_SEED = 1234  # one sampling seed for every checkpoint: arms differ by their weights only


def summarize(
    per_response: Sequence[tuple[int, list[str], list[float]]], n_prompts: int, lengths: Sequence[int], cap: int
) -> dict[str, Any]:
    """Per-reward and summed means over responses, and the per-prompt mean summed reward.

    per_response: (prompt index, reward names, reward values) for each sampled response.
    Returns {"rewards": {name: mean}, "total": mean summed reward, "per_prompt_total": [G floats],
             "instruction_level": mean over responses of the mean reward (the share of a prompt's rewards met),
             "prompt_level": share of responses meeting every reward, "per_prompt_instruction_level": [G floats],
             "per_response": [[prompt index, [values]]] (names as in "names_by_prompt"), "names_by_prompt",
             "responses": N, "truncated_frac", "mean_response_tokens"}.
    The instruction and prompt levels are IFEval's; with K the same for every prompt the first is total / K.
    """
    by_name: dict[str, list[float]] = {}
    per_prompt: list[list[float]] = [[] for _ in range(n_prompts)]
    per_prompt_frac: list[list[float]] = [[] for _ in range(n_prompts)]
    names_by_prompt: list[list[str] | None] = [None] * n_prompts
    met_all = []
    for index, names, values in per_response:
        for name, value in zip(names, values):
            by_name.setdefault(name, []).append(float(value))
        per_prompt[index].append(float(sum(values)))
        per_prompt_frac[index].append(float(sum(values)) / max(1, len(values)))
        names_by_prompt[index] = list(names)
        met_all.append(float(bool(values) and all(v == 1.0 for v in values)))
    totals = [sum(v) for v in per_prompt if v]
    counts = [len(v) for v in per_prompt if v]
    return {
        "rewards": {name: sum(v) / len(v) for name, v in sorted(by_name.items())},
        "total": sum(totals) / max(1, sum(counts)),
        "per_prompt_total": [sum(v) / len(v) if v else None for v in per_prompt],
        "instruction_level": sum(sum(v) for v in per_prompt_frac) / max(1, sum(counts)),
        "prompt_level": sum(met_all) / max(1, len(met_all)),
        "per_prompt_instruction_level": [sum(v) / len(v) if v else None for v in per_prompt_frac],
        "names_by_prompt": names_by_prompt,
        "per_response": [[index, [float(x) for x in values]] for index, _, values in per_response],
        "responses": len(per_response),
        "truncated_frac": sum(n >= cap for n in lengths) / max(1, len(lengths)),
        "mean_response_tokens": sum(lengths) / max(1, len(lengths)),
    }


def score_checkpoint(
    task: str,
    data: Path,
    model: str,
    prompts: int,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    seed: int = HELDOUT_SAMPLE_SEED,
) -> dict[str, Any]:
    """Sample and score ``model`` on the first ``prompts`` rows of ``data``; ``summarize``'s dict plus the set-up."""
    import torch
    from transformers import AutoTokenizer

    from mrtpo_openrlhf.diagnostics.runner import load_rows, resolve_model, score

    from .probe import sample_vllm

    model_path = resolve_model(model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    rows = load_rows(Path(data), prompts)
    t0 = time.time()
    drawn = sample_vllm(model_path, rows, samples, max_new_tokens, temperature, seed)
    scored, lengths = [], []
    for s in drawn:
        vec = score(task, s.prompt, tokenizer.decode(s.response_ids, skip_special_tokens=False), s.label)
        scored.append((s.prompt_index, vec.names, vec.values))
        lengths.append(len(s.response_ids))
    out = summarize(scored, len(rows), lengths, max_new_tokens)
    out["setup"] = {
        "task": task,
        "data": str(data),
        "model": str(model),
        "prompts": len(rows),
        "samples": samples,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "seconds": round(time.time() - t0, 1),
        "cpu": torch.backends.cpu.get_cpu_capability(),
    }
    return out


def write(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
