"""The actor's replay method on a tiny model equals the core's replay."""

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from openrlhf_fakes import fake_actor

from mrtpo_openrlhf.core import replay_relevance, request_from_ids
from mrtpo_openrlhf.ports import RAY_WORKER_PORTS_END, ephemeral_range


def test_actor_replay_equals_core(tiny_llama):
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(3, 100, (n,), generator=g).tolist()  # noqa: E731
    reqs = [
        request_from_ids(ids(7), [ids(3), ids(2)], ids(5), [0, 1]),
        request_from_ids(ids(4), [ids(4), []], ids(8), [0, 1]),
    ]
    actor = fake_actor(tiny_llama)
    calls = []
    handle = tiny_llama.register_forward_hook(lambda *a: calls.append(1))
    try:
        q = actor.replay_relevance(
            reqs, min_forwards=5, num_rewards=2, temperature=0.7, micro_batch_size=2, chunk_size=3, js_kernel="eager"
        )
    finally:
        handle.remove()
    ref, _ = replay_relevance(tiny_llama, reqs, num_rewards=2, temperature=0.7, micro_batch_size=2, chunk_size=3)
    assert torch.allclose(q, ref, atol=1e-6)
    assert len(calls) == 5  # padded to the fixed count
    assert actor.actor.training  # train mode restored


class _StoreStrategy:
    """Binds rank 0's store port the way torch's TCPStore does, from the environment upstream's __init__ set."""

    listener = None

    def setup_distributed(self):
        self.listener = socket.socket()
        self.listener.bind(("", int(os.environ["MASTER_PORT"])))
        self.listener.listen()


@pytest.mark.parametrize("name", ["MRTPOPolicyModelActorBase", "MRTPOReferenceModelActorBase"])
def test_rank0_store_port_is_held_from_start_until_the_store_binds_it(name, monkeypatch):
    """Upstream's ``__init__`` asks ``self._get_free_port()``, its ``init_model_from_pretrained`` calls
    ``self._setup_distributed(strategy)``: in between nothing else can bind the port, then the store can."""
    import mrtpo_openrlhf.adapter.actor as actor_module

    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    actor = getattr(actor_module, name)(1, 0, "127.0.0.1", None)
    port = actor._master_port
    assert RAY_WORKER_PORTS_END < port < ephemeral_range()[0] and os.environ["MASTER_PORT"] == str(port)
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("", port))  # another process's listener, or a connection, while the model loads
    strategy = _StoreStrategy()
    actor._setup_distributed(strategy)
    try:
        assert strategy.listener.getsockname()[1] == port and actor.strategy is strategy
    finally:
        strategy.listener.close()


class _SavingStrategy:
    """Upstream's ``DeepspeedStrategy.save_model`` on one rank: ``save_pretrained`` (safetensors) + tokenizer."""

    def __init__(self, args):
        self.args = args

    def is_rank_0(self):
        return True

    def save_model(self, model, tokenizer, output_dir, **kwargs):
        model.model.save_pretrained(output_dir)
        (Path(output_dir) / "tokenizer_config.json").write_text("{}")


def _modes(folder):
    return {p.name: p.stat().st_mode & 0o777 for p in Path(folder).iterdir() if p.is_file()}


def test_saved_weights_are_readable_like_every_other_file_of_the_run(tiny_llama, tmp_path, monkeypatch):
    """Issue 49, item 4: safetensors wrote ``model.safetensors`` 0600 beside 0644 files, so on shared storage a
    teammate could not load the weights. Under umask 022 every saved file is 0644, the final model and an HF
    checkpoint (``--ckpt.save_hf``) alike."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor_module

    monkeypatch.setattr(ppo_actor_module, "torch_dist_barrier_and_cuda_sync", lambda: None)
    old = os.umask(0o022)
    try:
        actor = fake_actor(tiny_llama)
        ckpt = SimpleNamespace(output_dir=str(tmp_path / "final"), path=str(tmp_path / "ckpt"))
        actor.strategy = _SavingStrategy(SimpleNamespace(ckpt=ckpt, train=SimpleNamespace(enable_ema=False)))
        actor.save_hf_ckpt, actor.disable_ds_ckpt = True, True
        actor.save_model()
        actor.save_checkpoint("global_step2")
    finally:
        os.umask(old)
    for folder in (ckpt.output_dir, tmp_path / "ckpt" / "global_step2_hf"):
        modes = _modes(folder)
        assert "model.safetensors" in modes and set(modes.values()) == {0o644}, {k: oct(v) for k, v in modes.items()}


def test_share_like_umask_adds_read_bits_only(tmp_path):
    from mrtpo_openrlhf.paths import share_like_umask

    private, script = tmp_path / "a" / "w.bin", tmp_path / "run.sh"
    private.parent.mkdir()
    private.write_text("x")
    private.chmod(0o600)
    script.write_text("x")
    script.chmod(0o750)
    old = os.umask(0o027)  # a team that keeps files from "other": group gets read, other nothing
    try:
        share_like_umask(tmp_path)
    finally:
        os.umask(old)
    assert private.stat().st_mode & 0o777 == 0o640 and script.stat().st_mode & 0o777 == 0o750
