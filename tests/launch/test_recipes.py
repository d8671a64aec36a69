"""The CPU recipe's micro-batch: the largest divisor of a rank's share of the batch not above the setting."""

import pytest

from mrtpo_openrlhf.core.settings import RUN_SETTINGS
from mrtpo_openrlhf.launch.default import mrtpo_cpu_args
from mrtpo_openrlhf.launch.recipes import cpu_grpo_args, micro_divisor


@pytest.mark.parametrize(
    "per_rank, limit, expected",
    [(8, 4, 4), (9, 4, 3), (7, 4, 1), (12, 5, 4), (8, None, 8), (4, 8, 4), (16, 4, 4)],
)
def test_micro_divisor_by_hand(per_rank, limit, expected):
    assert micro_divisor(per_rank, limit) == expected


def test_micro_divisor_refuses_zero():
    with pytest.raises(ValueError, match="micro_batch_size must be >= 1"):
        micro_divisor(8, 0)


def flag(args, name):
    return args[args.index(name) + 1]


def test_the_embedded_default_trains_in_micro_batches_of_the_cpu_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("MRTPO_CPU_DTYPE", "bf16")
    args = mrtpo_cpu_args("sql", "mrtpo", tmp_path / "m", tmp_path / "out", 4, 2, 4, None, 0.5, 1)
    assert RUN_SETTINGS["cpu"].micro_batch_size == 4
    assert flag(args, "--train.batch_size") == "8"
    assert flag(args, "--train.micro_batch_size") == flag(args, "--rollout.micro_batch_size") == "4"
    # 2 prompts x 3 samples: 6 is not a multiple of 4, so 3 (DeepSpeed needs the batch to divide)
    odd = mrtpo_cpu_args("sql", "mrtpo", tmp_path / "m", tmp_path / "out", 4, 2, 3, None, 0.5, 1)
    assert flag(odd, "--train.micro_batch_size") == "3"
    # without a setting a rank takes its whole share at once, as before
    whole = cpu_grpo_args("m", "p.jsonl", "r.py", "o", prompts_per_step=2, samples_per_prompt=4, actor_ranks=2)
    assert flag(whole, "--train.micro_batch_size") == "4"
    # fp32: twice the bytes a sequence, half the sequences a micro-batch
    monkeypatch.setenv("MRTPO_CPU_DTYPE", "fp32")
    fp32 = mrtpo_cpu_args("sql", "mrtpo", tmp_path / "m", tmp_path / "out", 4, 2, 4, None, 0.5, 1)
    assert flag(fp32, "--train.micro_batch_size") == flag(fp32, "--rollout.micro_batch_size") == "2"
    assert [RUN_SETTINGS["cpu"].micro_batch_for(b) for b in (2, 4)] == [4, 2]
    assert RUN_SETTINGS["gpu"].micro_batch_for(4) is None


def test_one_rank_shares_its_gpu_with_the_engine_and_both_sleep():
    one = cpu_grpo_args("m", "p.jsonl", "r.py", "o")
    assert "--train.colocate_all" in one and "--vllm.enable_sleep" in one and "--ds.enable_sleep" in one
    # colocate_all needs as many actor ranks as engines (one): two ranks keep their own GPUs, vLLM awake
    two_ranks = cpu_grpo_args("m", "p.jsonl", "r.py", "o", actor_ranks=2)
    for args in (two_ranks, cpu_grpo_args("m", "p.jsonl", "r.py", "o", colocate=False)):
        assert not {"--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep"} & set(args)
