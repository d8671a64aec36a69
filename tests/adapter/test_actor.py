"""The actor's replay method on a tiny model equals the core's replay."""

import os
import socket

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
