"""cpu/vllm_in_actor.py: vLLM's engine core inside the rollout actor behaves as upstream's AsyncLLMEngine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("vllm_in_actor_check.py")


def start_check(model, which):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MRTPO_CPU", "VLLM_"))}
    return subprocess.Popen(
        [sys.executable, str(CHECK), str(model), which],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def result(proc):
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, stdout[-3000:] + stderr[-5000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
def test_in_actor_engine_generates_what_async_llm_engine_generates(tmp_path):
    from mrtpo_openrlhf.models import make_tiny_model

    model = make_tiny_model(tmp_path / "model", arch="llama", hidden_size=64, intermediate_size=64)
    # both engines at once, each in its own process: most of each check is vLLM's start-up
    checks = {which: start_check(model, which) for which in ("in_actor", "async")}
    ours, reference = result(checks["in_actor"]), result(checks["async"])

    # six concurrent requests, greedy and seeded sampling: the same tokens as the engine-core process gives
    assert ours["tokens"] == reference
    assert all(len(t) == 10 for t in reference)
    assert ours["sleeping"] is False
    assert ours["too_long"] != "accepted" and ours["after_error"] == reference[0]
    assert ours["done_while_paused"] is False and ours["after_resume"] == reference[2]
    assert ours["unfinished_after_cancel"] == 0
    assert len(ours["rpc"]) == 1  # one worker, in this process
    # sleep frees the KV cache (32 MiB here) until the "kv_cache" tag wakes, which brings it back zeroed
    assert ours["kv_awake"][0] >= 32 << 20
    assert ours["kv_asleep"] == [0, True] and ours["sleeping_asleep"] is True
    assert ours["kv_weights_woken"] == [0, True] and ours["sleeping_weights_woken"] is True
    assert ours["kv_woken"] == [ours["kv_awake"][0], True] and ours["sleeping_woken"] is False
    assert ours["tokens_after_sleep"] == reference
    # level 2 releases the packed weights of every linear layer (qkv, o, gate_up, down per block, the lm_head);
    # the KV cache cannot wake before a sync packs them again, and after a full round the tokens are the same
    assert ours["released_asleep"] >= 5
    assert "a level-2 sleep must be followed by a full weight sync" in ours["woken_unsynced"]
    assert ours["released_synced"] == 0 and ours["sleeping_synced"] is False
    assert ours["tokens_after_release"] == reference
