"""The reward vector travels through upstream's _process_response_into_experience and concat_experiences."""

from types import SimpleNamespace

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf_fakes import make_args, vllm_response

from mrtpo_openrlhf.adapter.experience_maker import RewardBatch
from mrtpo_openrlhf.adapter.samples_generator import MRTPOSamplesGenerator
from mrtpo_openrlhf.adapter.transport import VECTOR, pop_reward_vectors
from mrtpo_openrlhf.rewards.contract import RewardVector


def generator(cls):
    gen = cls.__new__(cls)
    gen.args = make_args()
    gen.strategy = SimpleNamespace(args=gen.args)
    return gen


def test_upstream_rejects_string_extra_logs():
    """The contract we work around: upstream tensorizes every extra_logs value."""
    resp = vllm_response([1, 2], [3, 4], "p", ["format"], [1.0], ["block text"])
    with pytest.raises((ValueError, TypeError)):
        generator(SamplesGenerator)._process_response_into_experience(resp, max_len=64)


def test_vectors_survive_processing_and_concat():
    gen = generator(MRTPOSamplesGenerator)
    r1 = vllm_response(
        [1, 2, 3], [4, 5], "p1", ["format", "executable", "execution"], [1.0, 0.0, 1.0], ["fmt", "err", "gold"]
    )
    r2 = vllm_response([1, 2], [6, 7, 8, 9], "p2", ["c1", "c2"], [0.0, 1.0], ["no commas", ""])
    e1 = gen._process_response_into_experience(r1, max_len=64)
    e2 = gen._process_response_into_experience(r2, max_len=64)
    # numeric extra logs still reach upstream's info, strings do not
    assert e1.info["sql_ok"].tolist() == [1.0]
    assert all(not k.startswith("mrtpo_reward") for k in e1.info if k != VECTOR)
    merged = Experience.concat_experiences([e1, e2], pad_token_id=0)
    assert all(isinstance(v, RewardVector) for v in merged.info[VECTOR])
    assert [v.names for v in merged.info[VECTOR]] == [["format", "executable", "execution"], ["c1", "c2"]]
    merged.index = [1, 0]  # the rollout order the experience maker restores
    batch = RewardBatch.from_vectors([merged], [pop_reward_vectors(merged)])
    assert torch.equal(batch.values, torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]))
    assert torch.equal(batch.present, torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    assert batch.names == [["c1", "c2", ""], ["format", "executable", "execution"]]
    assert batch.blocks == [["no commas", "", ""], ["fmt", "err", "gold"]]
    assert batch.spans == [None, None]  # these reward functions record no block spans
    assert VECTOR not in merged.info
    assert all(isinstance(v, torch.Tensor) and v.shape == (2,) for v in merged.info.values())


def test_block_spans_travel_with_the_vector():
    gen = generator(MRTPOSamplesGenerator)
    resp = vllm_response([1, 2], [3], "p", ["a", "b"], [1.0, 0.0], ["x", "y"])
    resp["extra_logs"]["mrtpo_reward_spans"] = [[4, 9], None]
    e = gen._process_response_into_experience(resp, max_len=64)
    e.index = [0]
    batch = RewardBatch.from_vectors([e], [pop_reward_vectors(e)])
    assert batch.spans == [[(4, 9), None]]
    resp["extra_logs"]["mrtpo_reward_spans"] = [[4, 9]]
    with pytest.raises(ValueError, match="2 rewards"):
        gen._process_response_into_experience(resp, max_len=64)


def test_plain_scalar_reward_becomes_one_unnamed_reward():
    gen = generator(MRTPOSamplesGenerator)
    resp = vllm_response([1], [2, 3], "p", ["x"], [1.0], ["b"])
    resp["extra_logs"] = {}
    resp["reward"] = 0.5
    e = gen._process_response_into_experience(resp, max_len=64)
    (vec,) = e.info[VECTOR]
    assert vec.names == ["reward"] and vec.values == [0.5] and [it.block for it in vec.items] == [""]


def test_json_list_reward_without_mrtpo_keys():
    """Issue 10 item 9: the HTTP server's reward arrives as a JSON list [x]; it becomes one (1,) scalar reward."""
    gen = generator(MRTPOSamplesGenerator)
    resp = vllm_response([1], [2, 3], "p", ["x"], [1.0], ["b"])
    resp["extra_logs"] = {}
    resp["reward"], resp["scores"] = [0.5], [0.25]
    e = gen._process_response_into_experience(resp, max_len=64)
    (vec,) = e.info[VECTOR]
    assert vec.values == [0.5] and vec.names == ["reward"]
    assert e.rewards.shape == (1,) and e.scores.shape == (1,) and e.rewards.item() == 0.5
    with pytest.raises(ValueError, match="one reward per response"):
        resp["reward"] = [0.5, 1.0]
        gen._process_response_into_experience(resp, max_len=64)


def test_a_reward_setup_error_stops_the_run_with_its_message(monkeypatch, tmp_path):
    """The SQL reward's missing-database error, as a rollout process returns it, fails the trainer's sample
    processing with the path (upstream would have turned a raised exception into a silent zero reward)."""
    from mrtpo_openrlhf.adapter.transport import RewardSetupError
    from mrtpo_openrlhf.tasks.sql.reward import reward_func

    monkeypatch.setenv("MRTPO_SQL_DB_ROOT", str(tmp_path))
    label = {"db_id": "school", "gold": "SELECT 1"}
    out = reward_func(["<think>t</think>\n```sql\nSELECT 1\n```"], [""], [label])
    resp = vllm_response([1, 2], [3, 4], "p", ["x"], [0.0], [""])
    resp.update(reward=out["rewards"], scores=out["scores"], extra_logs=out["extra_logs"])
    with pytest.raises(RewardSetupError, match=f"SQL database not found: {tmp_path / 'school' / 'school.sqlite'}"):
        generator(MRTPOSamplesGenerator)._process_response_into_experience(resp, max_len=64)


def test_a_response_without_a_reward_from_a_remote_reward_stops_the_run():
    """Issue 49, item 5: upstream turns a failed reward call (a server's non-200 answer) into ``reward None`` after
    logging it, and the MRTPO generator scored that as 0.0: it stops the run instead."""
    from mrtpo_openrlhf.adapter.transport import RewardSetupError

    gen = generator(MRTPOSamplesGenerator)
    gen.args.reward = SimpleNamespace(remote_url=["http://127.0.0.1:5000/get_reward"])
    resp = vllm_response([1, 2], [3, 4], "p", ["x"], [0.0], [""])
    resp.update(reward=None, scores=None, extra_logs={})
    with pytest.raises(RewardSetupError, match="no reward for a response"):
        gen._process_response_into_experience(resp, max_len=64)
