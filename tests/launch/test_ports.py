"""Ports for a private Ray head: distinct, and never one given to two components (Ray then refuses to start)."""

from mrtpo_openrlhf.launch import runner


def test_free_ports_are_distinct_and_avoid_the_given_ones(monkeypatch):
    handed_out = iter([5000, 5000, 5001, 8265, 5002])  # an OS that repeats itself and hands out a taken port

    class FakeSocket:
        def bind(self, address):
            self.port = next(handed_out)

        def getsockname(self):
            return ("127.0.0.1", self.port)

        def close(self):
            pass

    monkeypatch.setattr(runner.socket, "socket", FakeSocket)
    assert runner.free_ports(3, avoid=[8265]) == [5000, 5001, 5002]


def test_real_ports_distinct():
    ports = runner.free_ports(64)
    assert len(set(ports)) == 64


def test_ray_start_command_gives_every_component_its_own_port(tmp_path):
    command = runner.ray_start_command(2, 1, 6380, tmp_path, dashboard_port=8265)
    ports = [int(command[i + 1]) for i, flag in enumerate(command) if flag.endswith("-port") or flag == "--port"]
    assert len(ports) == 2 + len(runner._RAY_PORT_FLAGS)
    assert len(set(ports)) == len(ports), ports
