"""``launch/smoke.py``: the GPU smoke run's verdict on a run folder, checked on folders a run would leave (the checks
are ``default.check_run``'s and the resume's; the inputs are written here)."""

import json

from mrtpo_openrlhf.launch.smoke import check_smoke, main


def run_folder(tmp_path, steps=(1, 2, 3), kl=1e-3, loss=0.1, ckpt=True, model=True):
    out = tmp_path / "smoke"
    out.mkdir(parents=True)
    rows = [
        {"step": s, "policy_loss": loss, "vllm_kl": kl, "reward/format/mean": 0.5, "mrtpo/replay_forwards_per_rank": s}
        for s in steps
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if ckpt:
        (out / "ckpt" / "_actor" / "global_step2").mkdir(parents=True)
    if model:
        (out / "model").mkdir()
        (out / "model" / "config.json").write_text("{}")
    return out


def test_a_complete_smoke_run_passes(tmp_path, capsys):
    out = run_folder(tmp_path)
    assert check_smoke(out, "mrtpo", 3)[0] == []
    assert main(["--out", str(out), "--steps", "3"]) == 0
    assert "3 steps, 1 per-reward means; replay forwards per rank by step: 1, 2, 3" in capsys.readouterr().out


def test_each_broken_part_is_named(tmp_path):
    cases = {
        "restarted": (dict(steps=(1, 2, 1)), "steps logged [1, 2, 1], expected 1..3 once each"),
        "nan": (dict(loss=float("nan")), "step 1: policy_loss is nan"),
        "off_policy": (dict(kl=0.5), "vLLM does not sample from the policy being trained"),
        "no_ckpt": (dict(ckpt=False), "no checkpoint in"),
        "no_model": (dict(model=False), "no saved model in"),
    }
    for name, (kwargs, expected) in cases.items():
        problems, _ = check_smoke(run_folder(tmp_path / name, **kwargs), "mrtpo", 3)
        assert any(expected in p for p in problems), (name, problems)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_smoke(empty, "mrtpo", 3)[0][0].startswith("no metrics were written")
