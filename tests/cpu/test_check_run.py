"""The post-run check that decides whether a CPU run really trained (an exit code of 0 proves nothing)."""

import json

from mrtpo_openrlhf.launch.default import check_run


def _write(path, kls, reward_keys=True):
    rows = []
    for step, kl in enumerate(kls, start=1):
        row = {"step": step, "policy_loss": 0.1, "vllm_kl": kl}
        if reward_keys:
            row["reward/format/mean"] = 0.5
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_noisy_step_is_not_a_failed_sync(tmp_path):
    # The shape of a real 16-step bf16 run: every step within noise, the last one at 7.6e-3.
    kls = [
        0.0029,
        0.0018,
        0.0023,
        0.0027,
        -0.0003,
        0.0005,
        0.0046,
        0.0016,
        0.0041,
        0.0024,
        0.0015,
        0.0039,
        0.0036,
        0.0045,
        0.0029,
        0.0076,
    ]
    assert check_run(_write(tmp_path / "m.jsonl", kls), "mrtpo") == []


def test_a_dropped_sync_grows_and_is_caught(tmp_path):
    kls = [0.003] + [0.004 * step for step in range(2, 17)]
    problems = check_run(_write(tmp_path / "m.jsonl", kls), "mrtpo")
    assert len(problems) == 1 and "did not reach vLLM" in problems[0]


def test_two_step_run_uses_its_second_step(tmp_path):
    assert check_run(_write(tmp_path / "ok.jsonl", [0.02, 0.001]), "gdpo") == []
    assert check_run(_write(tmp_path / "bad.jsonl", [0.001, 0.02]), "gdpo")


def test_nan_and_missing_reward_metrics(tmp_path):
    problems = check_run(_write(tmp_path / "m.jsonl", [0.001, float("nan")], reward_keys=False), "mrtpo")
    assert any("vllm_kl is nan" in p for p in problems)
    assert any("per-reward metrics" in p for p in problems)
    assert check_run(tmp_path / "absent.jsonl", "mrtpo") == [f"no metrics were written ({tmp_path / 'absent.jsonl'})"]
