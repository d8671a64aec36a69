"""End-to-end generation on CPU with a tiny random model (slow: builds the model and runs transformers)."""

import pytest

from mrtpo_openrlhf.evaluation.generation import choose_backend


def test_backend_choice_is_explicit_or_automatic():
    assert choose_backend("transformers") == "transformers"
    assert choose_backend("auto") in ("vllm", "transformers")
    with pytest.raises(ValueError):
        choose_backend("tpu")


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
