"""CPU-mode dtype choice: detection from /proc/cpuinfo text, MRTPO_CPU_DTYPE, and what the launcher records."""

import json
from pathlib import Path

import pytest

from mrtpo_openrlhf.cpu import dtype as cpu_dtype
from mrtpo_openrlhf.launch import runner

# Abridged real /proc/cpuinfo blocks (one processor each; flags lines cut but keeping the relevant ones).
EPYC_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat sse sse2 ht syscall nx mmxext fxsr_opt
 pdpe1gb rdtscp lm constant_tsc rep_good nopl fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand avx2
 bmi1 bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero vaes vpclmulqdq
"""
# the wrapped lines above are not "flags" lines: a realistic cpuinfo has them on one line; keep it realistic too
EPYC_AVX2 = EPYC_AVX2.replace("\n ", " ")
XEON_SPR = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
ZEN4 = (
    "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n\n"
    "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
)
DECOY = "processor\t: 0\nmodel name\t: avx512_bf16 amx_bf16 in a name only\nflags\t\t: fpu avx2 avx512f avx512_bf16x\n"


@pytest.mark.parametrize(
    "text, flags, dtype",
    [
        (EPYC_AVX2, (), "fp32"),
        (XEON_SPR, ("amx_bf16", "avx512_bf16"), "bf16"),
        (ZEN4, ("avx512_bf16",), "bf16"),
        (DECOY, (), "fp32"),  # only whole tokens of a flags line count
        ("", (), "fp32"),  # no /proc/cpuinfo (not Linux): the safe choice
    ],
    ids=["epyc-avx2", "xeon-amx", "zen4", "decoy", "empty"],
)
def test_detect_dtype_from_cpuinfo_text(text, flags, dtype):
    assert cpu_dtype.bf16_flags(text) == flags
    assert cpu_dtype.detect_dtype(text) == dtype
    assert cpu_dtype.resolve("auto", text).dtype == dtype
    assert cpu_dtype.resolve("", text).dtype == dtype  # unset means auto


def test_forced_values_win_over_hardware_and_bad_values_fail(monkeypatch):
    assert cpu_dtype.resolve("fp32", XEON_SPR).dtype == "fp32"
    assert cpu_dtype.resolve(" BF16 ", EPYC_AVX2).dtype == "bf16"
    monkeypatch.setenv(cpu_dtype.ENV_VAR, "fp32")
    choice = cpu_dtype.resolve(cpuinfo_text=XEON_SPR)
    assert (choice.dtype, choice.requested, choice.bf16_flags) == ("fp32", "fp32", ("amx_bf16", "avx512_bf16"))
    for bad in ("fp16", "float32", "yes"):
        with pytest.raises(ValueError, match="auto, bf16, fp32"):
            cpu_dtype.resolve(bad, XEON_SPR)


def test_auto_keeps_bf16_on_a_bf16_machine(monkeypatch):
    """On this project's CI machine (avx512_bf16) auto must keep the bf16 path that the e2e tests exercise."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "avx512_bf16" not in text.split() and "amx_bf16" not in text.split():
        pytest.skip("this CPU has no bf16 instructions")
    monkeypatch.delenv(cpu_dtype.ENV_VAR, raising=False)
    assert cpu_dtype.train_dtype() == "bf16"
    assert runner.cpu_env(base={})[cpu_dtype.ENV_VAR] == "bf16"


def test_cpu_env_passes_a_concrete_dtype(monkeypatch):
    monkeypatch.delenv(cpu_dtype.ENV_VAR, raising=False)
    assert runner.cpu_env(base={"MRTPO_CPU_DTYPE": "fp32"})[cpu_dtype.ENV_VAR] == "fp32"
    assert runner.cpu_env(base={}, extra={"MRTPO_CPU_DTYPE": "fp32"})[cpu_dtype.ENV_VAR] == "fp32"
    assert runner.cpu_env(base={})[cpu_dtype.ENV_VAR] in ("bf16", "fp32")  # auto never reaches a process
    with pytest.raises(ValueError, match="MRTPO_CPU_DTYPE"):
        runner.cpu_env(base={"MRTPO_CPU_DTYPE": "half"})


def test_dtype_line_and_dry_run(monkeypatch, capsys, tmp_path):
    record = {"cpu_dtype": "fp32", "requested": "auto", "bf16_flags": [], "cpu_capability": "AVX2"}
    assert runner.dtype_line(record) == "CPU dtype fp32 (auto; no bf16 instructions; torch CPU capability AVX2)"
    monkeypatch.delenv(cpu_dtype.ENV_VAR, raising=False)
    assert runner.run_openrlhf_cpu("m", [], tmp_path, dry_run=True, extra_env={"MRTPO_CPU_DTYPE": "fp32"}) is None
    out = capsys.readouterr().out
    assert "# CPU dtype fp32 (MRTPO_CPU_DTYPE=fp32;" in out and "export MRTPO_CPU_DTYPE=fp32" in out
    choice = runner.dtype_choice({"MRTPO_CPU_DTYPE": "bf16"})  # extra_env beats the environment
    assert choice.dtype == "bf16" and json.loads(json.dumps(runner.dtype_record(choice)))["requested"] == "bf16"
