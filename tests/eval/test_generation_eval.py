"""Generation for eval: backend, device and dtype choice, one model load per process, hub ids, provenance."""

import subprocess
from pathlib import Path

import pytest
import torch

from mrtpo_openrlhf.evaluation import generation
from mrtpo_openrlhf.evaluation.generation import GenerationConfig, Generator, choose_backend, choose_device_dtype
from mrtpo_openrlhf.paths import REPO_ROOT


def test_backend_choice_is_explicit_or_automatic(monkeypatch):
    assert choose_backend("transformers") == "transformers"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_backend("auto") == "transformers"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_backend("auto") == "vllm"  # vllm(-cpu) is installed in this venv
    with pytest.raises(ValueError):
        choose_backend("tpu")


@pytest.mark.parametrize(
    "cuda, bf16, requested, expected",
    [
        (True, True, "auto", ("cuda", "bf16")),
        (True, False, "auto", ("cuda", "fp16")),  # e.g. a V100: no bf16
        (True, True, "fp32", ("cuda", "fp32")),
        (False, False, "auto", ("cpu", "fp32")),  # a CPU without bf16 instructions
        (False, True, "auto", ("cpu", "bf16")),  # issue 49, item 7: one with them, as training picks (cpu/dtype.py)
        (False, False, "bf16", ("cpu", "bf16")),  # asked for
        (False, True, "fp32", ("cpu", "fp32")),
    ],
)
def test_device_and_dtype_follow_cuda(monkeypatch, cuda, bf16, requested, expected):
    from mrtpo_openrlhf.cpu import dtype as cpu_dtype

    cpuinfo = "flags\t: fpu sse2 avx2" + (" avx512_bf16 amx_bf16" if bf16 else "")
    monkeypatch.setattr(cpu_dtype, "read_cpuinfo", lambda *a: cpuinfo)
    monkeypatch.delenv(cpu_dtype.ENV_VAR, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert choose_device_dtype(requested) == expected
    with pytest.raises(ValueError, match="--dtype"):
        choose_device_dtype("int8")


def test_generator_on_a_gpu_machine_records_cuda_bf16(monkeypatch, tmp_path):
    """What a run on a GPU machine without vLLM would use (nothing is loaded: there is no GPU here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    model = tmp_path / "m"
    model.mkdir()
    record = Generator(str(model), GenerationConfig(backend="transformers")).record()
    assert record == {"backend": "transformers", "device": "cuda", "dtype": "bf16", "model_path": str(model)}
    assert Generator(str(model)).record()["backend"] == "vllm"  # auto, vLLM installed


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from mrtpo_openrlhf.models import make_tiny_model

    return make_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model", arch="llama", hidden_size=64, intermediate_size=64
    )


@pytest.fixture
def count_loads(monkeypatch):
    """The dtypes of every real ``AutoModelForCausalLM.from_pretrained`` call (the load itself is not replaced)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(generation, "_LOADED", {})  # start without an engine loaded by another test
    real, loads = AutoModelForCausalLM.from_pretrained, []

    def spy(*args, **kwargs):
        model = real(*args, **kwargs)
        loads.append(next(model.parameters()).dtype)
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", staticmethod(spy))
    return loads


def _args(model, *extra):
    bench = ["--benchmark", "bird", "--benchmark", "muldimif", "--limit", "1"]
    return [*bench, "--model", str(model), "--max-new-tokens", "2", "--backend", "transformers", *extra]


def test_model_loaded_once_per_process_and_provenance(tiny_model, run_cli, kit, count_loads, monkeypatch):
    monkeypatch.setenv("MRTPO_CPU_DTYPE", "fp32")  # auto on the CPU is training's dtype: fp32 forced here
    code, out = run_cli(*_args(tiny_model))
    assert code == 0
    assert count_loads == [torch.float32]  # once for both benchmarks, fp32 as forced (the file is bf16)
    for bench in ("bird", "muldimif"):
        assert len(kit.read_records(out, bench)) == 1
    meta = kit.read_summary(out)["meta"]
    assert (meta["backend"], meta["device"], meta["dtype"]) == ("transformers", "cpu", "fp32")
    assert meta["model_path"] == str(tiny_model) and meta["generation"]["max_new_tokens"] == 2
    import transformers

    assert meta["versions"]["torch"] == torch.__version__
    assert meta["versions"]["transformers"] == transformers.__version__
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert meta["git"]["commit"] == head.stdout.strip() and isinstance(meta["git"]["dirty"], bool)

    code, _ = run_cli(*_args(tiny_model))  # a second run in the same process reuses the loaded model
    assert code == 0 and count_loads == [torch.float32]
    code, out = run_cli(*_args(tiny_model, "--dtype", "bf16"))  # bf16 on the CPU when asked: a new load
    assert code == 0 and count_loads == [torch.float32, torch.bfloat16]
    assert kit.read_summary(out)["meta"]["dtype"] == "bf16"


def _hf_cache_with(root: Path, repo_id: str, model: Path) -> Path:
    """An HF hub cache (the layout huggingface_hub writes) holding ``model`` as ``repo_id`` at main."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for f in model.iterdir():
        (snapshot / f.name).symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_hub_id_from_the_hf_cache_when_the_hub_is_unreachable(tiny_model, tmp_path, run_cli, kit, monkeypatch):
    import huggingface_hub.constants

    snapshot = _hf_cache_with(tmp_path / "hub", "test-org/tiny-eval", tiny_model)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(generation, "_LOADED", {})
    code, out = run_cli(*_args("test-org/tiny-eval"))
    assert code == 0
    meta = kit.read_summary(out)["meta"]
    assert meta["model"] == "test-org/tiny-eval" and Path(meta["model_path"]) == snapshot
    assert (out / "summary.json").is_file() and "| tiny-eval |" in (out / "results.md").read_text(encoding="utf-8")


def test_hub_id_without_a_hub_is_one_line(tmp_path, run_cli, capsys, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    code, out = run_cli("--benchmark", "bird", "--model", "test-org/not-cached")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert err.startswith("error: --model test-org/not-cached: not a local folder, not in the Hugging Face cache")
    assert "give a model folder" in err
    code, _ = run_cli("--benchmark", "bird", "--model", str(tmp_path / "no-such-folder"))
    err = capsys.readouterr().err
    assert code == 2 and "model folder not found" in err and err.count("\n") == 1


@pytest.mark.slow
def test_tiny_model_end_to_end(tmp_path, run_cli, kit):
    from mrtpo_openrlhf.models import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny", arch="llama")
    code, out = run_cli(
        "--benchmark",
        "bird",
        "--benchmark",
        "muldimif",
        "--model",
        model,
        "--limit",
        "2",
        "--max-new-tokens",
        "6",
        "--batch-size",
        "2",
        "--backend",
        "transformers",
    )
    assert code == 0
    for bench in ("bird", "muldimif"):
        records = kit.read_records(out, bench)
        assert len(records) == 2
        for r in records.values():
            assert isinstance(r["response"], str) and isinstance(r["verdict"], bool) and r["prompt"]
    summary = kit.read_summary(out)
    assert set(summary["benchmarks"]) == {"bird", "muldimif"} and summary["meta"]["generation"]["max_new_tokens"] == 6
    assert "| BIRD EX | MulDimIF | Avg |" in (out / "results.md").read_text(encoding="utf-8")
