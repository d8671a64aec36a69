"""Ports we ask to listen on: distinct, outside the kernel's ephemeral range, never one already bound."""

import random
import socket

from mrtpo_openrlhf import ports
from mrtpo_openrlhf.launch import runner
from mrtpo_openrlhf.ports import RAY_WORKER_PORTS_END, ephemeral_range, free_ports, held_port


class _Scripted(random.Random):
    """Draws the given ports in order, then those of a seeded generator."""

    def __init__(self, scripted):
        super().__init__(0)
        self.scripted = list(scripted)

    def randint(self, a, b):
        return self.scripted.pop(0) if self.scripted else super().randint(a, b)


def _range_file(tmp_path, low, high):
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    return path


def test_free_ports_are_distinct_and_avoid_the_given_ones(monkeypatch):
    handed_out = iter([5000, 5000, 5001, 8265, 5002])  # a draw that repeats itself and hits a taken port

    class FakeSocket:
        def bind(self, address):
            self.port = next(handed_out)

        def getsockname(self):
            return ("127.0.0.1", self.port)

        def close(self):
            pass

    monkeypatch.setattr(ports.socket, "socket", FakeSocket)
    assert free_ports(3, avoid=[8265]) == [5000, 5001, 5002]


def test_real_ports_distinct_and_between_ray_workers_and_the_ephemeral_range(tmp_path):
    path = _range_file(tmp_path, 32768, 60999)
    drawn = free_ports(64, range_file=path)
    assert len(set(drawn)) == 64
    assert all(RAY_WORKER_PORTS_END < port < 32768 for port in drawn)


def test_a_bound_port_is_skipped(tmp_path):
    path = _range_file(tmp_path, 32768, 60999)
    held = socket.socket()
    for taken in range(25000, 26000):
        try:
            held.bind(("", taken))
            break
        except OSError:
            continue
    held.listen()
    try:
        drawn = free_ports(1, rng=_Scripted([taken, taken]), range_file=path)
        assert drawn[0] != taken and RAY_WORKER_PORTS_END < drawn[0] < 32768
    finally:
        held.close()


def test_no_room_below_the_range_lets_the_kernel_pick(tmp_path):
    path = _range_file(tmp_path, 20010, 60999)  # ten ports between Ray's and the ephemeral range
    port = free_ports(1, rng=_Scripted([20005] * 5), range_file=path)[0]
    assert port != 20005 and port >= ephemeral_range()[0]  # the kernel's pick, not a draw from the narrow gap


def test_unreadable_range_file_means_linux_default(tmp_path):
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    bad = tmp_path / "bad"
    bad.write_text("not ports")
    assert ephemeral_range(bad) == (32768, 60999)


def test_ray_start_command_gives_every_component_its_own_port(tmp_path):
    command = runner.ray_start_command(2, 1, 6380, tmp_path, dashboard_port=8265)
    ports_given = [int(command[i + 1]) for i, flag in enumerate(command) if flag.endswith("-port") or flag == "--port"]
    assert len(ports_given) == 2 + len(runner._RAY_PORT_FLAGS)
    assert len(set(ports_given)) == len(ports_given), ports_given


def test_a_held_port_is_drawn_in_the_range_and_nobody_else_can_bind_it(tmp_path):
    path = _range_file(tmp_path, 32768, 60999)
    holder = held_port(rng=random.Random(3), range_file=path)
    port = holder.getsockname()[1]
    assert RAY_WORKER_PORTS_END < port < 32768
    with socket.socket() as other:
        try:
            other.bind(("", port))
            bound = True
        except OSError:
            bound = False
    holder.close()
    assert not bound
    with socket.socket() as listener:  # released: the store binds it
        listener.bind(("", port))
        listener.listen()
