"""``scripts/install_gpu.sh`` as far as a machine without GPUs can check it: run with a fake Python (its pip records
every call, its torch answers a CUDA version) and a fake ``nvcc`` on PATH, the script must install in upstream's
order with the right flags; and pip's own resolver must accept the pinned GPU set (where the index is reachable)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from mrtpo_openrlhf.cli.doctor import PINS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_gpu.sh"


def install(tmp_path, nvcc: str | None = "13.0", torch_cuda: str = "13.0", python=(3, 11), **env):
    """Run the script; the calls its Python received, one list of words each (DS_BUILD_FUSED_ADAM=... in front)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    fake = bin_dir / "python-fake"
    major, minor = python
    fake.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = -c ]; then case "$2" in\n'
        f"  *version_info*) [ {major} -eq 3 ] && [ {minor} -ge 10 ] && [ {minor} -le 13 ]; exit $? ;;\n"
        f"  *platform*) echo {major}.{minor}.0; exit 0 ;;\n"
        f"  *torch.version.cuda*) echo '{torch_cuda}'; exit 0 ;;\n"
        "esac; fi\n"
        f'echo "DS_BUILD_FUSED_ADAM=${{DS_BUILD_FUSED_ADAM:-}} $*" >> {log}\n'
    )
    fake.chmod(0o755)
    if nvcc:
        (bin_dir / "nvcc").write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc}, V{nvcc}.48'\n")
        (bin_dir / "nvcc").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX")}
    res = subprocess.run(
        ["bash", str(SCRIPT)],
        env={**clean, "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(fake), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    return res, calls


def pip_calls(calls):
    """(DS_BUILD_FUSED_ADAM, the pip words after `-m pip`) for each pip call."""
    return [(c[0].split("=", 1)[1], c[3:]) for c in calls if c[1:3] == ["-m", "pip"]]


def index(calls, package):
    (i,) = [i for i, (_, words) in enumerate(pip_calls(calls)) if package in words]
    return i


def test_order_and_flags_where_nvcc_matches_torch(tmp_path):
    res, calls = install(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    pips = pip_calls(calls)
    assert pips[0][1][0] == "uninstall" and "flash-attn" in pips[0][1] and "pynvml" in pips[0][1]
    torch_vllm = index(calls, f"vllm=={PINS['vllm']}")
    assert f"torch=={PINS['torch']}" in pips[torch_vllm][1]
    deepspeed, openrlhf = index(calls, f"deepspeed=={PINS['deepspeed']}"), index(calls, "openrlhf==0.11.2")
    flash, project = index(calls, f"flash-attn=={PINS['flash_attn']}"), index(calls, str(REPO))
    assert 0 < torch_vllm < deepspeed < openrlhf < flash < project  # upstream's order; the project last
    assert pips[deepspeed][0] == "1" and "--no-build-isolation" in pips[deepspeed][1]  # FusedAdam prebuilt
    assert "--no-build-isolation" in pips[flash][1]
    assert "--no-deps" in pips[openrlhf][1] and pips[project][1][-3:] == ["--no-deps", "-e", str(REPO)]
    isolated = [words for _, words in pips if "--no-build-isolation" in words]
    assert len(isolated) == 2  # only the two builds against the installed torch
    assert calls[-1][1:] == ["-m", "mrtpo_openrlhf.cli.doctor"]


@pytest.mark.parametrize("nvcc", [None, "12.8"])
def test_without_a_matching_nvcc_nothing_is_built(tmp_path, nvcc):
    res, calls = install(tmp_path, nvcc=nvcc)
    assert res.returncode == 0, res.stdout + res.stderr
    pips = pip_calls(calls)
    assert not any("flash-attn==2.8.3" in words for _, words in pips)
    assert not any("--no-build-isolation" in words for _, words in pips)
    deepspeed = index(calls, "deepspeed==0.19.6")
    assert pips[deepspeed][0] == ""  # FusedAdam left to the actors' start; the doctor checks nvcc there
    assert "run with ATTN_IMPL=sdpa" in res.stdout and "FusedAdam is not prebuilt" in res.stdout


def test_skip_flash_attn_and_old_python(tmp_path):
    res, calls = install(tmp_path, SKIP_FLASH_ATTN="1")
    assert res.returncode == 0 and not any("flash-attn==2.8.3" in w for _, w in pip_calls(calls))
    res, calls = install(tmp_path, python=(3, 9))
    assert res.returncode == 2 and calls == [] and "use 3.10-3.13" in res.stdout


def test_the_pins_agree_everywhere():
    """The install script, the doctor, setup.cfg's gpu extra and the Dockerfile name the same versions."""
    script = SCRIPT.read_text()
    for name, version in PINS.items():
        assert f"{name.replace('_', '-')}=={version}" in script, name
    assert f"vllm=={PINS['vllm']}" in (REPO / "setup.cfg").read_text()
    docker = (REPO / "docker" / "Dockerfile").read_text()
    assert f"vllm/vllm-openai:v{PINS['vllm']}" in docker and f"flash-attn=={PINS['flash_attn']}" in docker


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pips_resolver_accepts_the_pinned_gpu_set(pip_resolver_run):
    """pip's resolver on the pinned set against the public index (no local wheel folder: it holds the CPU torch),
    for this machine's Python and platform: it must pick torch 2.13.0's CUDA 13 build and resolve without conflict.
    Skipped where the index cannot be reached. Started with the session (tests/pip_resolver.py): about 2-4.5 min on
    a 2-core machine (219 packages' metadata from PyPI), mostly waiting on the network."""
    code, stderr = pip_resolver_run.wait()
    if code is None:
        pytest.skip("pip's resolver did not finish in 540 s here (a slow or busy network): not a verdict")
    if code != 0 and ("NewConnectionError" in stderr or "No matching distribution" in stderr):
        pytest.skip(f"the package index is not reachable here: {stderr.strip().splitlines()[-1]}")
    assert code == 0, stderr[-3000:]
    report = pip_resolver_run.report
    installs = json.loads(report.read_text())["install"]
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
    assert chosen["torch"] == PINS["torch"] and chosen["vllm"] == PINS["vllm"]  # not "+cpu"
    assert any(name.startswith("nvidia-") and "13" in version.split(".")[0] for name, version in chosen.items())
