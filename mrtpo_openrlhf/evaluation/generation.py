"""Generate responses for evaluation prompts: vLLM when it is installed and a GPU is there, else transformers.

Both backends apply the model's chat template to a single user turn (the training prompt format), decode greedily
by default, and return plain response text (special tokens skipped).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

logger = logging.getLogger(__name__)

MODEL_ALIASES = ("smollm2",)


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 1024
    batch_size: int = 8
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    backend: str = "auto"  # auto | vllm | transformers


def resolve_model(model: str) -> str:
    """``smollm2`` -> the converted SmolLM2-135M-Instruct folder; anything else must be an existing folder."""
    if model == "smollm2":
        from mrtpo_openrlhf.models import ensure_smollm2

        return str(ensure_smollm2())
    if not Path(model).is_dir():
        raise FileNotFoundError(f"model folder {model} not found (give an HF model folder or one of {MODEL_ALIASES})")
    return model


def choose_backend(requested: str = "auto") -> str:
    """vLLM iff it is importable and ``torch.cuda.is_available()``; ``transformers`` otherwise."""
    if requested not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be auto, vllm or transformers, got {requested!r}")
    if requested != "auto":
        return requested
    import torch

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "transformers"


def chat_prompts(tokenizer, prompts: Sequence[str]) -> list[str]:
    """Each prompt as one user turn through the tokenizer's chat template, ready for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; evaluation uses the training chat format")
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]


def _generate_transformers(model_dir: str, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"  # decoder-only batching: pad on the left so generation continues the prompt
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    texts = chat_prompts(tokenizer, prompts)
    torch.manual_seed(cfg.seed)
    sampling = (
        {"do_sample": False}
        if cfg.temperature <= 0
        else {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p}
    )
    # Longest prompts first: batches of similar length waste less padding; results are put back in order.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    outputs: list[str] = [""] * len(texts)
    with torch.inference_mode(), tqdm(total=len(texts), desc="generating (transformers)", unit="prompt") as bar:
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            gen = model.generate(
                **enc, max_new_tokens=cfg.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
            )
            new_tokens = gen[:, enc["input_ids"].shape[1] :]
            for i, text in zip(idx, tokenizer.batch_decode(new_tokens, skip_special_tokens=True)):
                outputs[i] = text
            bar.update(len(idx))
    return outputs


def _generate_vllm(model_dir: str, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    llm = LLM(model=model_dir, seed=cfg.seed)
    params = SamplingParams(
        temperature=cfg.temperature,
        top_p=cfg.top_p if cfg.temperature > 0 else 1.0,
        max_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
    )
    results = llm.generate(chat_prompts(tokenizer, prompts), params, use_tqdm=True)
    return [r.outputs[0].text for r in results]


def generate(model: str, prompts: Sequence[str], cfg: GenerationConfig = GenerationConfig()) -> list[str]:
    """Responses for ``prompts`` (same order) from the model folder or alias ``model``."""
    if not prompts:
        return []
    model_dir = resolve_model(model)
    backend = choose_backend(cfg.backend)
    logger.info("generating %d responses with %s from %s", len(prompts), backend, model_dir)
    runner = _generate_vllm if backend == "vllm" else _generate_transformers
    return runner(model_dir, prompts, cfg)
