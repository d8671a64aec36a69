"""Fixtures shared by every test folder."""

import pytest
import torch

TINY_VOCAB = 101


@pytest.fixture(scope="session")
def tiny_llama():
    """A seeded 2-layer random Llama (no weights on disk) with SDPA attention, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.config._attn_implementation = "sdpa"
    return model


def pytest_sessionstart(session):
    """A build lock left by a killed run would hang every test that loads a DeepSpeed op (see runner.py)."""
    import os

    from mrtpo_openrlhf.launch.runner import clear_stale_build_locks

    extensions = os.environ.get("TORCH_EXTENSIONS_DIR")
    for lock in clear_stale_build_locks(extensions) if extensions else []:
        print(f"removed a stale torch extension build lock: {lock}")
