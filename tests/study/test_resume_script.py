"""The tool study's resume script stops on a CPU without bf16 instructions before it builds anything."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs/results/tool-smollm2-cpu/resume.sh"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
DECOY = "processor\t: 0\nmodel name\t: has avx512_bf16 in its name\nflags\t\t: fpu avx2 avx512_bf16x\n"


def check(tmp_path: Path, cpuinfo: str, **env) -> subprocess.CompletedProcess:
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo)
    full = {k: v for k, v in os.environ.items() if k != "MRTPO_CPU_DTYPE"}
    full.update(MRTPO_CPUINFO=str(info), STUDY_WORKTREE=str(tmp_path / "wt"), **env)
    return subprocess.run(["bash", str(SCRIPT), "--check"], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cpuinfo", [AVX2, DECOY, ""], ids=["avx2", "decoy", "empty"])
def test_stops_without_bf16_instructions(tmp_path, cpuinfo):
    done = check(tmp_path, cpuinfo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no bf16 instructions" in done.stdout
    assert "would run" not in done.stdout and not (tmp_path / "wt").exists()


def test_goes_on_with_bf16_instructions(tmp_path):
    done = check(tmp_path, ZEN4)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no bf16 instructions" not in done.stdout
    assert "would start: study run" in done.stdout or "already going" in done.stdout
    assert not (tmp_path / "wt").exists()  # --check builds nothing


def test_stops_when_fp32_is_forced(tmp_path):
    done = check(tmp_path, ZEN4, MRTPO_CPU_DTYPE="fp32")
    assert done.returncode == 1 and "MRTPO_CPU_DTYPE=fp32" in done.stdout


XEON_AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_stops_on_a_cpu_with_amx_unless_told(tmp_path):
    """Seed 12's base came from a CPU without AMX; CPUs with AMX rebuilt the other base every time (notes.md)."""
    done = check(tmp_path, XEON_AMX)
    assert done.returncode == 1 and "this CPU has AMX" in done.stdout, done.stdout + done.stderr
    assert "would rebuild" not in done.stdout and not (tmp_path / "wt").exists()
    anyway = check(tmp_path, XEON_AMX, ANY_CPU="1")
    assert "this CPU has AMX" not in anyway.stdout and anyway.returncode == 0, anyway.stdout + anyway.stderr
