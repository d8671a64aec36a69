"""Fixtures shared by every test folder."""

import importlib.util
import os
import sys

import pytest
import torch

# upstream's openrlhf.models imports flash_attn at module level; where it is missing, the CPU layer's stand-in (as
# the CPU runs install it), so that any test file runs alone as it does in the whole suite
if importlib.util.find_spec("flash_attn") is None:
    from mrtpo_openrlhf.cpu import flash_attn_stub

    flash_attn_stub.install()

# importlib import mode puts no test folder on sys.path; helpers shared across folders (gloo_ranks) live here.
sys.path.insert(0, os.path.dirname(__file__))

from parallel import pytest_collection_modifyitems, pytest_configure, pytest_runtest_setup, under_xdist  # noqa: E402,F401

TINY_VOCAB = 101
PIP_RESOLVER = pytest.StashKey()


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


def pytest_report_header(config):
    """The CPU the timings were measured on (a 2-core AMD EPYC without AMX runs the slow tests ~2x longer than a
    Xeon with AMX)."""
    import os

    from mrtpo_openrlhf.provenance import cpu_flags, cpu_model

    flags = ", ".join(cpu_flags()) or "no avx2/avx512/bf16 flags"
    return f"cpu: {cpu_model()}, {os.cpu_count()} cores ({flags}); torch {torch.backends.cpu.get_cpu_capability()}"


def pytest_sessionstart(session):
    """A build lock left by a killed run would hang every test that loads a DeepSpeed op (see runner.py)."""
    import os

    from mrtpo_openrlhf.launch.runner import clear_stale_build_locks

    extensions = os.environ.get("TORCH_EXTENSIONS_DIR")
    for lock in clear_stale_build_locks(extensions) if extensions else []:
        print(f"removed a stale torch extension build lock: {lock}")


def pytest_collection_finish(session):
    """pip's resolver test waits on the network for minutes: start it now, to run beside the CPU-bound tests. Under
    xdist every worker collects every test, so there the test starts it itself (its worker is not the critical
    path: tests/parallel.py)."""
    import pip_resolver

    if under_xdist():
        return
    if not session.config.option.collectonly and any(item.name == pip_resolver.TEST_NAME for item in session.items):
        session.config.stash[PIP_RESOLVER] = pip_resolver.start()


def pytest_sessionfinish(session):
    resolver = session.config.stash.get(PIP_RESOLVER, None)
    if resolver is not None:
        resolver.close()


@pytest.fixture
def pip_resolver_run(request):
    """The resolver started with the session (or now, where the session did not start it)."""
    import pip_resolver

    resolver = request.config.stash.get(PIP_RESOLVER, None) or pip_resolver.start()
    request.config.stash[PIP_RESOLVER] = resolver
    return resolver
