"""Rank 0's rendezvous port: outside the kernel's ephemeral range, never a port already bound."""

import random
import socket

import pytest

from mrtpo_openrlhf.adapter.ports import RAY_WORKER_PORTS_END, ephemeral_range, rendezvous_port


class _Scripted(random.Random):
    """Returns the given ports in order, then defers to a seeded generator."""

    def __init__(self, ports):
        super().__init__(0)
        self.ports = list(ports)

    def randint(self, a, b):
        return self.ports.pop(0) if self.ports else super().randint(a, b)


def _range_file(tmp_path, low, high):
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    return path


def test_ports_lie_between_ray_workers_and_the_ephemeral_range(tmp_path):
    path = _range_file(tmp_path, 32768, 60999)
    ports = {rendezvous_port(random.Random(seed), path) for seed in range(50)}
    assert all(RAY_WORKER_PORTS_END < port < 32768 for port in ports)
    assert len(ports) > 40  # drawn, not one fixed port that two groups would share


def test_a_bound_port_is_skipped(tmp_path):
    path = _range_file(tmp_path, 32768, 60999)
    with socket.socket() as held:
        held.bind(("", 0))
        taken = held.getsockname()[1]
        held.listen()
        if not RAY_WORKER_PORTS_END < taken < 32768:
            # the kernel gave an ephemeral port: take one in the range by hand
            held.close()
            held = socket.socket()
            for taken in range(25000, 26000):
                try:
                    held.bind(("", taken))
                    break
                except OSError:
                    continue
            held.listen()
        port = rendezvous_port(_Scripted([taken, taken]), path)
        assert port != taken and RAY_WORKER_PORTS_END < port < 32768
        held.close()


def test_no_room_below_the_range_falls_back_to_the_kernel(tmp_path):
    path = _range_file(tmp_path, 20010, 60999)  # ten ports between Ray's and the ephemeral range
    port = rendezvous_port(random.Random(0), path)
    with socket.socket() as sock:
        sock.bind(("", port))  # free when returned


def test_unreadable_range_file_means_linux_default(tmp_path):
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    bad = tmp_path / "bad"
    bad.write_text("not ports")
    assert ephemeral_range(bad) == (32768, 60999)


@pytest.mark.parametrize("name", ["MRTPOPolicyModelActorBase", "MRTPOReferenceModelActorBase"])
def test_upstream_init_takes_our_port(name, monkeypatch):
    """Upstream's BaseDistributedActor.__init__ asks ``self._get_free_port()`` when no port is given."""
    import mrtpo_openrlhf.adapter.actor as actor_module

    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    actor = getattr(actor_module, name)(1, 0, "127.0.0.1", None)
    low = ephemeral_range()[0]
    assert RAY_WORKER_PORTS_END < actor._master_port < low
