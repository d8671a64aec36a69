"""A short cold-start SFT of the base model through OpenRLHF's own SFT trainer, on the CPU path.

    python -m mrtpo_openrlhf.study coldstart --out runs/coldstart/tool-sft --steps 6 --lr 3e-5

SmolLM2-135M-Instruct never writes the tool layout (``<think>...</think><tool_call>...</tool_call>``) when asked
(0 of 512 samples, with or without a worked example in the prompt: ``docs/results/probe/``), so the format reward
would give no signal. A few SFT steps on tool calls in that layout, from BFCL categories the study never trains or
evaluates on, bring it to a rate the study can measure learning from. The SFT rows are the tool task's own prompts
(``rewards.tool.to_row``) with the reference call (``render_calls``) after a one-line ``<think>``.

Runs ``python -m openrlhf.cli.train_sft`` in one process (world size 1, ZeRO stage 0) with the CPU layer's
environment (``launch.runner.cpu_env``), saves the final model as an HF folder and writes ``cold_start.json``:
the command, the data's sha256, the model weights' sha256 and the ids it trained on.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

# BFCL categories the SFT rows come from: none is in the study's pool (simple_python, multiple).
SFT_CATEGORIES = ("live_simple", "simple_java", "simple_javascript")
THINK_LINE = "The request is answered by {names}; I take its arguments from the request."
COLD_START = "cold_start.json"


class ColdStartError(RuntimeError):
    pass


def sft_rows(categories: Sequence[str] = SFT_CATEGORIES, seed: int = 0) -> list[dict]:
    """{"id", "prompt", "response"} rows: the tool prompt of each item and its reference call in the layout."""
    from mrtpo_openrlhf.tasks.tool.reward import to_row
    from mrtpo_openrlhf.tasks.tool.verifier import load_bfcl, reference_calls, render_calls

    rows = []
    for category in categories:
        for item in load_bfcl(category):
            calls = reference_calls(item.ground_truth, item.functions)
            names = ", ".join(sorted({c.name for c in calls})) or "none of the functions"
            think = THINK_LINE.format(names=names)
            prompt = to_row(item.id, category, item.messages, item.functions, item.ground_truth)["prompt"]
            response = f"<think>\n{think}\n</think>\n{render_calls(calls)}"
            rows.append({"id": item.id, "prompt": prompt, "response": response})
    random.Random(seed).shuffle(rows)
    return rows


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(model_dir: Path) -> str:
    """sha256 over the model folder's safetensors files, in name order."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ColdStartError(f"{model_dir}: no safetensors weights")
    return hashlib.sha256("".join(sha256_file(f) for f in files).encode()).hexdigest()


def sft_flags(
    model: Path, data: Path, out: Path, steps: int, lr: float, batch: int, micro: int, seed: int
) -> list[str]:
    return [
        "--model.model_name_or_path", str(model), "--data.dataset", str(data),
        "--data.input_key", "prompt", "--data.output_key", "response", "--data.apply_chat_template",
        "--data.max_len", "1024", "--data.max_samples", str(steps * batch),
        "--train.batch_size", str(batch), "--train.micro_batch_size", str(micro), "--train.max_epochs", "1",
        "--adam.lr", str(lr), "--lr_scheduler", "constant", "--lr_warmup_ratio", "0",
        "--ds.zero_stage", "0", "--ds.param_dtype", "bf16", "--ds.attn_implementation", "sdpa",
        "--ckpt.output_dir", str(out), "--ckpt.save_steps", "-1", "--logger.logging_steps", "1",
        "--train.seed", str(seed),
    ]  # fmt: skip


def package_versions(names: Sequence[str] = ("torch", "transformers", "deepspeed", "openrlhf", "accelerate")) -> dict:
    """The installed versions of the packages the SFT's numbers depend on (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def cold_start_record(
    model: str,
    base: Path,
    rows: list[dict],
    data: Path,
    out: Path,
    settings: dict,
    flags: list[str],
    env: dict,
    seconds: float,
) -> dict:
    """What ``cold_start.json`` holds: the inputs and their hashes, the weights' hash, and the machine and package
    versions it ran on (a rebuild that gives other weights can then be told apart by CPU or version)."""
    from mrtpo_openrlhf.provenance import provenance

    return {
        "base_model": model,
        "base_weights_sha256": weights_sha256(base),
        "categories": list(SFT_CATEGORIES),
        "rows": len(rows),
        "ids": [r["id"] for r in rows],
        "data_sha256": sha256_file(data),
        **settings,  # steps, lr, batch, seed
        "dtype": env.get("MRTPO_CPU_DTYPE"),
        "weights_sha256": weights_sha256(out),
        "seconds": seconds,
        "command": "python -m openrlhf.cli.train_sft " + " ".join(flags),
        "provenance": provenance(),
        "packages": package_versions(),
    }


def cold_start(
    out: Path,
    model: str = "smollm2",
    steps: int = 6,
    lr: float = 3e-5,
    batch: int = 8,
    micro: int = 4,
    seed: int = 0,
    exclude_ids: Sequence[str] = (),
) -> dict:
    """Train ``steps`` optimizer steps of ``batch`` rows and write the HF model to ``out``; returns the record."""
    from mrtpo_openrlhf.data.jsonl import write_jsonl
    from mrtpo_openrlhf.evaluation.generation import resolve_model
    from mrtpo_openrlhf.launch.runner import cpu_env
    from mrtpo_openrlhf.ports import free_port

    out = Path(out)
    rows = sft_rows(seed=seed)[: steps * batch]
    clash = sorted({r["id"] for r in rows} & set(exclude_ids))
    if clash:
        raise ColdStartError(f"SFT rows overlap the study's prompts: {clash[:5]}")
    out.mkdir(parents=True, exist_ok=True)
    data = out / "sft_rows.jsonl"
    write_jsonl(data, rows)
    base = Path(resolve_model(model))
    flags = sft_flags(base, data, out, steps, lr, batch, micro, seed)
    env = cpu_env(
        extra={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"},
    )
    env["MASTER_PORT"] = str(free_port())
    command = [sys.executable, "-m", "openrlhf.cli.train_sft", *flags]
    t0 = time.time()
    with open(out / "sft.log", "w") as log:
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not list(out.glob("*.safetensors")):
        raise ColdStartError(f"train_sft failed (exit {done.returncode}); log: {out / 'sft.log'}")
    settings = {"steps": steps, "lr": lr, "batch": batch, "seed": seed}
    record = cold_start_record(model, base, rows, data, out, settings, flags, env, round(time.time() - t0, 1))
    (out / COLD_START).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record
