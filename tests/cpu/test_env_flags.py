"""``MRTPO_CPU``/``MRTPO_GPU`` read one way (``mrtpo_openrlhf.env_flags``) by sitecustomize, the CPU package and the
training CLI (its test: ``tests/adapter/test_cli_no_gpu.py``)."""

import pytest

from mrtpo_openrlhf import cpu, env_flags

from .test_patches import run_python

ON = ["1", "true", "TRUE", " yes ", "On"]
OFF = ["", "0", "false", "no", "off", "2", "enabled"]


@pytest.mark.parametrize("value", ON + OFF)
def test_spellings(value):
    on = value in ON
    env = {"MRTPO_CPU": value, "MRTPO_GPU": value}
    assert env_flags.cpu_layer_on(env) is on and env_flags.gpu_forced(env) is on
    assert env_flags.cpu_layer_on({}) is False and env_flags.gpu_forced({}) is False


def test_the_cpu_package_reads_the_one_helper(monkeypatch):
    assert cpu.is_enabled is env_flags.cpu_layer_on and cpu.ENV_FLAG == "MRTPO_CPU"
    monkeypatch.setenv("MRTPO_CPU", "yes")
    assert cpu.is_enabled()


def test_sitecustomize_accepts_true():
    out = run_python(
        """
        import torch
        print(torch.cuda.current_device(), torch.cuda.is_available())
        """,
        {"MRTPO_CPU": "true"},
    )
    assert out.split() == ["cpu", "False"]
