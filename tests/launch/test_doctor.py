"""``mrtpo-doctor`` in faked environments: the checks are the real ones; their inputs are fake programs on PATH
(``nvidia-smi``, ``nvcc``), fake packages on ``sys.path`` (flash-attn, vLLM's metadata) and torch's CUDA answers
monkeypatched. Each environment must name its own first fix, and a complete one must pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mrtpo_openrlhf.cli import doctor

REPO = Path(__file__).resolve().parents[2]
H100_CSV = "580.65.06, NVIDIA H100 80GB HBM3, 81559"


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A machine with only what each test puts there: PATH has a private bin folder (and /bin for sh), no CUDA_HOME,
    fake packages importable from a private site folder."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    site.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.syspath_prepend(str(site))
    for name in ("flash_attn", "vllm"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    class Env:
        def gpu_node(self, driver_csv=H100_CSV, gpus=8, nvcc="13.0", cuda="13.0"):
            lines = "\\n".join([driver_csv] * gpus)
            tool(bin_dir, "nvidia-smi", f"printf '{lines}\\n'")
            if nvcc:
                tool(bin_dir, "nvcc", f"echo 'Cuda compilation tools, release {nvcc}, V{nvcc}.48'")
            monkeypatch.setattr(torch.version, "cuda", cuda)
            monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda is not None)
            monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus if cuda else 0)
            monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
            self.package("flash_attn", "__version__ = '2.8.3'\n")
            self.dist("vllm", "0.29.0")

        def package(self, name, source):
            (site / name).mkdir(exist_ok=True)
            (site / name / "__init__.py").write_text(source)

        def dist(self, name, version):
            info = site / f"{name}-{version}.dist-info"
            info.mkdir(exist_ok=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")

    return Env()


def run(capsys, *argv):
    code = doctor.main(["--attn", "flash_attention_2", *argv])
    out = capsys.readouterr().out
    return code, out, {line.split()[0] if " on " not in line else line: line for line in out.splitlines()}


def first_fix(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_a_complete_gpu_node_passes(env, capsys):
    env.gpu_node()
    code, out, _ = run(capsys)
    assert code == 0, out
    assert "8 x NVIDIA H100 80GB HBM3, 80 GiB each" in out and "2.27.7" in out and "ready for a GPU run" in out


def test_no_nvidia_smi(env, capsys, monkeypatch):
    env.gpu_node()
    os.remove(Path(os.environ["PATH"].split(":")[0]) / "nvidia-smi")
    code, out, _ = run(capsys)
    assert code == 1
    assert first_fix(out).startswith("doctor: 2 problem(s); first fix: install the NVIDIA driver >= 580")
    assert "nvidia-smi not found" in first_fix(out)


def test_old_driver_for_the_cuda_13_torch(env, capsys):
    env.gpu_node(driver_csv="550.54.15, NVIDIA H100 80GB HBM3, 81559")
    code, out, _ = run(capsys)
    assert code == 1
    line = first_fix(out)
    assert "first fix: upgrade the NVIDIA driver to >= 580 (or use a torch built for CUDA 12;" in line
    assert "550.54.15; torch" in line and "CUDA 13.0 build" in line


def test_cpu_torch(env, capsys):
    env.gpu_node(cuda=None)
    code, out, _ = run(capsys)
    assert code == 1
    line = first_fix(out)
    assert "first fix: bash scripts/install_gpu.sh (installs torch 2.13.0, CUDA 13)" in line
    assert "a CPU-only build" in line


def test_no_nvcc_and_fused_adam_not_prebuilt(env, capsys, monkeypatch):
    env.gpu_node(nvcc=None)
    monkeypatch.setattr(doctor, "deepspeed_prebuilt_ops", lambda: {"fused_adam": False})
    code, out, _ = run(capsys)
    assert code == 1
    assert "first fix: install the CUDA 13.0 toolkit and set CUDA_HOME, or reinstall DeepSpeed with" in first_fix(out)
    # prebuilt at install: no nvcc is needed
    monkeypatch.setattr(doctor, "deepspeed_prebuilt_ops", lambda: {"fused_adam": True})
    code, out, _ = run(capsys)
    assert code == 0, out


def test_nvcc_of_another_cuda_major(env, capsys):
    env.gpu_node(nvcc="12.8")
    code, out, _ = run(capsys)
    assert code == 1 and "nvcc 12.8 vs torch's CUDA 13.0" in first_fix(out)


def test_no_flash_attn_or_a_broken_build(env, capsys, tmp_path):
    env.gpu_node()
    (tmp_path / "site" / "flash_attn" / "__init__.py").unlink()
    (tmp_path / "site" / "flash_attn").rmdir()
    code, out, _ = run(capsys)
    assert code == 1
    assert "first fix: pip install flash-attn==2.8.3 --no-build-isolation" in first_fix(out)
    assert "or run with ATTN_IMPL=sdpa" in first_fix(out)
    assert doctor.main(["--attn", "sdpa"]) == 0  # the user chose sdpa: flash-attn is not needed
    capsys.readouterr()
    # installed but built for another torch: the real import fails, and the row says how
    env.package("flash_attn", "raise ImportError('flash_attn_2_cuda.so: undefined symbol: _ZN3c10')\n")
    sys.modules.pop("flash_attn", None)
    code, out, _ = run(capsys)
    assert code == 1 and "ImportError: flash_attn_2_cuda.so: undefined symbol" in out


def test_paths_are_checked_where_the_run_reads_them(env, capsys, tmp_path):
    env.gpu_node()
    data = tmp_path / "rows.jsonl"
    code, out, _ = run(capsys, "--out", str(tmp_path / "new" / "run"), "--data", str(data))
    assert code == 1 and f"DATA on this machine: {data}: missing" in first_fix(out)
    assert re.search(r"OUT on this machine +ok", out), out  # not there yet: made at the start, its parent writable
    data.write_text("{}\n")
    assert run(capsys, "--out", str(tmp_path / "new" / "run"), "--data", str(data))[0] == 0


def test_a_cluster_reports_its_gpus_and_each_nodes_view(env, capsys, tmp_path):
    """RAY_ADDRESS: the cluster's GPUs and, from each GPU node, flash-attn and the paths (a fake ``ray`` that runs
    the real ``node_report`` once per node, as a Ray task would, with the node's answers)."""
    env.gpu_node()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    a, b, head = "aa" * 28, "bb" * 28, "cc" * 28  # Ray's node ids: 28 bytes in hex
    reports = {
        a: dict(doctor.node_report({"OUT": str(out_dir)}), host="gpu-a"),
        b: dict(host="gpu-b", driver="580.65.06", gpus=8, flash_attn="not installed", paths={"OUT": "missing"}),
    }

    class Remote:
        def options(self, scheduling_strategy):
            self.node = scheduling_strategy.node_id
            return self

        def remote(self, paths):
            return reports[self.node]

    class FakeRay:
        def init(self, **kwargs):
            self.address = kwargs["address"]

        def nodes(self):
            gpu = {"GPU": 8.0, "CPU": 64.0}
            return [
                {"NodeID": a, "Alive": True, "Resources": gpu},
                {"NodeID": b, "Alive": True, "Resources": gpu},
                {"NodeID": head, "Alive": True, "Resources": {"CPU": 8.0}},
            ]

        def remote(self, **kwargs):
            return lambda fn: Remote()

        def get(self, ref, timeout):
            return ref

        def shutdown(self):
            pass

    rows = doctor.cluster_checks("10.0.0.1:6379", {"OUT": str(out_dir)}, "flash_attention_2", ray_module=FakeRay())
    by_name = {r.name: r for r in rows}
    assert by_name["Ray cluster"].found == "10.0.0.1:6379: 3 node(s), 16 GPU(s) on 2"
    assert by_name["OUT on gpu-a"].status == "ok" and by_name["flash-attn on gpu-a"].status == "ok"
    assert by_name["flash-attn on gpu-b"].status == "FAIL" and by_name["OUT on gpu-b"].status == "FAIL"
    assert doctor.first_fix(rows).name == "flash-attn on gpu-b"
    assert "mount" in by_name["OUT on gpu-b"].fix and "every node" in by_name["OUT on gpu-b"].fix


def test_doctor_runs_as_a_module_on_this_machine_in_seconds():
    """On the machine running the suite (no GPU here): a table, exit 1, the first fix on the last line."""
    res = subprocess.run(
        [sys.executable, "-m", "mrtpo_openrlhf.cli.doctor"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    if torch.cuda.is_available():
        pytest.skip("a GPU machine: the faked environments above cover the failures")
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith("check ") and "first fix: " in res.stdout.strip().splitlines()[-1]
