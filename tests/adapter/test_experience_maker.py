"""The experience maker's advantages against naive loops (naive_reference.py) on hand-built experiences."""

import random
import statistics
from types import SimpleNamespace

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf_fakes import LocalActorGroup, fake_actor, make_args, vllm_response

import mrtpo_openrlhf.adapter.experience_maker as em
import mrtpo_openrlhf.core.estimators as estimators
from mrtpo_openrlhf.adapter.experience_maker import MRTPOExperienceMaker, response_span, split_for_ranks
from mrtpo_openrlhf.adapter.samples_generator import MRTPOSamplesGenerator
from mrtpo_openrlhf.adapter.transport import VECTOR
from mrtpo_openrlhf.core import JOINT, replay_relevance, request_from_text

NAMES = ["format", "executable", "execution"]


def rollout(seed=0, groups=2, n=4, vocab=101, truncate=0):
    """groups x n responses with varying lengths and 3 rewards; returns single-sample experiences.

    ``truncate``: drop this many leading prompt tokens, as upstream does with an over-long prompt."""
    rng = random.Random(seed)
    gen = MRTPOSamplesGenerator.__new__(MRTPOSamplesGenerator)
    gen.args = make_args(n=n)
    exps = []
    for gi in range(groups):
        prompt_text = f"Question {gi}: list all users. Answer in one SQL block."
        prompt_ids = [3 + ord(c) % (vocab - 3) for c in prompt_text]
        for _ in range(n):
            resp = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 9))]
            values = [float(rng.random() < 0.5) for _ in NAMES]
            error_block = "no such column: nme" if not values[1] else ""
            blocks = ["Answer in one SQL block.", error_block, "SELECT name FROM users"]
            exps.append(
                gen._process_response_into_experience(
                    vllm_response(prompt_ids[truncate:], resp, prompt_text, NAMES, values, blocks), max_len=256
                )
            )
    return exps


def maker(args, model, char_tokenizer, ranks=2):
    m = MRTPOExperienceMaker.__new__(MRTPOExperienceMaker)
    m.strategy = SimpleNamespace(args=args)
    m.args = args
    m.advantage_estimator = args.algo.advantage.estimator
    m.tokenizer = char_tokenizer
    m.kl_ctl = SimpleNamespace(value=0.05)
    m.actor_model_group = LocalActorGroup(fake_actor(model), ranks)
    m.global_step = 3
    m.last_metrics = {}
    return m


def micro_batches(samples, size, seed):
    """Shuffle sample order into micro-batches, as dynamic batching may; index keeps the rollout order."""
    for i, s in enumerate(samples):
        s.index = [i]
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    batches = [[samples[i] for i in order[j : j + size]] for j in range(0, len(order), size)]
    return [Experience.concat_experiences(batch, 0) for batch in batches]


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """LocalActorGroup returns the ranks' results themselves: the wait on Ray futures (get_ranks) passes them on."""
    monkeypatch.setattr(em, "get_ranks", lambda refs, actors, what="": refs)


def vector(e):
    """The single RewardVector a one-response sample carries."""
    (vec,) = e.info[VECTOR]
    return vec


def rewards_in_order(exps):
    vecs = [vector(e) for e in exps]
    return torch.tensor([v.values for v in vecs]), [[it.block for it in v.items] for v in vecs]


def gdpo_levels(R, n=4):
    """GDPO's response-level advantage per row from the naive loops (naive_reference.py)."""
    import naive_reference as ref

    A = ref.group_advantages(R.tolist(), n)
    S = [sum(row) for row in A]
    return torch.tensor([row[0] for row in ref.batch_step([[x] for x in S], S)])


def naive_advantages(samples, model, char_tokenizer, beta, cap):
    """Independent computation of the token advantages (mrtpo placement, no KL term): the replay run here on the whole
    batch at once, the group advantages, the placement and the batch step by naive loops. Returns ({row: expected
    advantages}, {reward name: [top-20% share of each replayed pair with q > 0]}, number of replayed pairs)."""
    import naive_reference as ref

    from mrtpo_openrlhf.core import localization

    R, blocks = rewards_in_order(samples)
    names = [[it.name for it in vector(s).items] for s in samples]
    K = R.shape[1]
    prompts = [s.prompts[0] for s in samples]
    spans = [response_span(s.sequences[0], s.attention_mask[0], s.action_mask[0]) for s in samples]
    A = ref.group_advantages(R.tolist(), 4)
    ks = [[k for k in range(K) if A[i][k] != 0 and blocks[i][k]] for i in range(len(R))]
    reqs = [request_from_text(char_tokenizer, prompts[i], blocks[i], spans[i][1], ks[i], "\n") for i in range(len(R))]
    q_list, _ = replay_relevance(model, reqs, num_rewards=K, temperature=0.9, chunk_size=5)
    rows = [
        ref.capped_token_advantages(A[i], q_list[i, :, : len(spans[i][1])].tolist(), beta, cap) for i in range(len(R))
    ]
    top: dict[str, list[float]] = {}
    for i in range(len(R)):
        for k in ks[i]:
            qk = q_list[i, k, : len(spans[i][1])]
            if float(qk.sum()) > 0:
                top.setdefault(names[i][k], []).append(float(localization(qk, torch.ones(len(qk), dtype=torch.bool))))
    return ref.batch_step(rows, [sum(a) for a in A]), top, sum(len(k) for k in ks)


@pytest.mark.parametrize("seed", [0, 1])
def test_mrtpo_advantages_equal_naive_reference(seed, tiny_llama, char_tokenizer):
    args = make_args(beta=0.5, cap=2.0)
    samples = rollout(seed)
    R, _ = rewards_in_order(samples)
    exps = micro_batches(samples, 3, seed)
    m = maker(args, tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(exps)

    expected, top, replayed = naive_advantages(samples, tiny_llama, char_tokenizer, 0.5, 2.0)
    for e in out:
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            # different micro-batch padding moves logits by ~1e-6, hence the tolerance
            assert torch.allclose(e.advantages[row][valid], torch.tensor(expected[g]), atol=1e-4), g
            assert (e.advantages[row][~valid] == 0).all()
            assert torch.equal(e.returns[row], e.advantages[row])
        assert VECTOR not in e.info
        assert all(isinstance(v, torch.Tensor) and v.shape == (len(e.index),) for v in e.info.values())
    metrics = m.pop_metrics()
    assert metrics["mrtpo/beta"] == 0.5
    # every reward of every response is present here: the share of the N x K pairs with A != 0 and a block
    assert 0 < replayed < R.numel() and metrics["mrtpo/replayed_pairs_frac"] == pytest.approx(replayed / R.numel())
    assert "reward/execution/mean" in metrics
    for k, name in enumerate(NAMES):  # the reward's own spread, as TRL's rewards/<name>/std (issue 49, item 10)
        column = R[:, k].tolist()
        assert metrics[f"reward/{name}/mean"] == pytest.approx(statistics.mean(column))
        assert metrics[f"reward/{name}/std"] == pytest.approx(statistics.stdev(column))
    for name, shares in top.items():
        assert metrics[f"mrtpo/{name}/top20_share"] == pytest.approx(sum(shares) / len(shares), abs=1e-4), name
    # same number of forwards on every rank
    ((_, kwargs),) = m.actor_model_group.calls
    assert len(set(kwargs["min_forwards"])) == 1


def test_gdpo_is_uniform_and_matches_reference(tiny_llama, char_tokenizer):
    args = make_args(estimator="gdpo")
    samples = rollout(3)
    R, _ = rewards_in_order(samples)
    exps = micro_batches(samples, 3, 3)
    m = maker(args, tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(exps)
    ref = gdpo_levels(R)
    for e in out:
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            assert torch.allclose(e.advantages[row][valid], ref[g].expand(int(valid.sum())), atol=1e-5)
            assert (e.advantages[row][~valid] == 0).all()
    assert m.actor_model_group.calls == []  # no replay for GDPO


def test_kl_in_reward_adds_reward_to_go(tiny_llama, char_tokenizer):
    args = make_args(estimator="gdpo", use_kl_loss=False)
    samples = rollout(4)
    R, _ = rewards_in_order(samples)
    exps = micro_batches(samples, 4, 0)
    for e in exps:
        e.kl = torch.full(e.action_mask.shape, 0.1) * e.action_mask
    m = maker(args, tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(exps)
    ref = gdpo_levels(R)
    e = out[0]
    valid = e.action_mask[0].bool()
    n = int(valid.sum())
    togo = -0.05 * 0.1 * torch.arange(n, 0, -1).float()
    assert torch.allclose(e.advantages[0][valid], ref[e.index[0]] + togo, atol=1e-5)


def test_beta_warmup_zero_step_skips_replay(tiny_llama, char_tokenizer):
    args = make_args(beta=0.5, warmup=10)
    m = maker(args, tiny_llama, char_tokenizer)
    m.global_step = 0
    out = m.compute_advantages_and_returns(micro_batches(rollout(5), 4, 1))
    assert m.actor_model_group.calls == [] and m.pop_metrics()["mrtpo/beta"] == 0.0
    assert all(torch.isfinite(e.advantages).all() for e in out)


def test_group_with_mismatched_reward_names_fails_clearly(tiny_llama, char_tokenizer):
    samples = rollout(6)
    vector(samples[1]).items[1].name = "oops"
    m = maker(make_args(), tiny_llama, char_tokenizer)
    with pytest.raises(ValueError, match="reward names differ inside one prompt's group"):
        m.compute_advantages_and_returns(micro_batches(samples, 4, 0))


def test_split_for_ranks_balances():
    parts = split_for_ranks([5, 1, 1, 1, 1, 1], 2)
    assert sorted(sum(([5, 1, 1, 1, 1, 1][i] for i in p), 0) for p in parts) == [5, 5]
    assert split_for_ranks([], 3) == [[], [], []]


def test_split_for_ranks_keeps_a_prompt_group_on_one_rank():
    costs = [3, 1, 2, 2, 1, 1]
    groups = [0, 0, 1, 1, 2, 2]  # two responses per prompt
    parts = split_for_ranks(costs, 2, groups)
    for part in parts:  # every group whole on one rank
        assert {groups[i] for i in part} == {g for g in groups if any(groups[i] == g for i in part)}
        assert all(sum(groups[j] == groups[i] for j in part) == 2 for i in part)
    assert sorted(sum(costs[i] for i in p) for p in parts) == [4, 6]  # groups cost 4, 4, 2: best split 4 | 6


@pytest.mark.parametrize("placement", ["joint", "shuffle"])
def test_ablation_placements_keep_each_response_credit(placement, tiny_llama, char_tokenizer):
    args = make_args(beta=0.5, placement=placement)
    samples = rollout(7)
    R, _ = rewards_in_order(samples)
    m = maker(args, tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 3, 2))
    ref = gdpo_levels(R)
    moved = False
    for e in out:
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            vals = e.advantages[row][valid]
            assert torch.isfinite(vals).all()
            assert vals.mean().item() == pytest.approx(ref[g].item(), abs=1e-4)  # placement moves, total stays
            moved |= not torch.allclose(vals, ref[g].expand_as(vals), atol=1e-4)
    assert moved  # the replay did place something
    ((_, kwargs),) = m.actor_model_group.calls
    requests = [r for rank in kwargs["requests"] for r in rank]
    if placement == "joint":
        assert all(list(r.minus_contexts) == [JOINT] for r in requests)


def capture_q(monkeypatch):
    """Record the (rows, q) the experience maker hands to the placement, keyed by global row."""
    seen = {}
    original = estimators.token_advantages

    def spy(adv, q, mask, *args, **kwargs):
        seen.setdefault("calls", []).append((q.clone(), mask.clone()))
        return original(adv, q, mask, *args, **kwargs)

    monkeypatch.setattr(estimators, "token_advantages", spy)
    return seen


def test_joint_keeps_blockless_rewards_uniform(monkeypatch, tiny_llama, char_tokenizer):
    """Issue 10 item 5: in the joint ablation a reward with no verifier block is placed uniformly, as in mrtpo."""
    import naive_reference as ref

    samples = rollout(8)
    R, blocks = rewards_in_order(samples)
    exps = micro_batches(samples, 3, 1)
    seen = capture_q(monkeypatch)
    m = maker(make_args(beta=0.5, placement="joint"), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(exps)
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(row) for row in A]
    blockless = [(g, k) for g in range(len(A)) for k in range(3) if A[g][k] != 0 and not blocks[g][k]]
    assert blockless  # the case under test occurs in this rollout
    rows, expected = {}, {}
    for e, (q, mask) in zip(out, seen["calls"]):
        for row, g in enumerate(e.index):
            valid = mask[row]
            profile = q[row][:, valid].amax(dim=0).tolist()
            placed = [A[g][k] != 0 and bool(blocks[g][k]) for k in range(3)]
            expected[g] = ref.token_advantages(A[g], [profile] * 3, 0.5, placed)
            rows[g] = e.advantages[row][valid]
    final = ref.batch_step([expected[g] for g in range(len(A))], S)
    for g, got in rows.items():
        assert torch.allclose(got, torch.tensor(final[g]), atol=1e-4), g


@pytest.mark.parametrize("placement", ["mrtpo", "joint"])
def test_replay_contexts_start_from_the_rollout_prompt_ids(placement, tiny_llama, char_tokenizer):
    """Issue 10 item 7: with prompts the rollout truncated, the replayed full context is what the policy saw plus
    the added blocks; in-prompt blocks that cannot be located in the ids are skipped and counted."""
    samples = rollout(9, truncate=10)
    prompt_ids = [response_span(s.sequences[0], s.attention_mask[0], s.action_mask[0])[0] for s in samples]
    m = maker(make_args(beta=0.5, placement=placement), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 3, 4))
    assert all(torch.isfinite(e.advantages).all() for e in out)
    ((_, kwargs),) = m.actor_model_group.calls
    requests = [r for rank in kwargs["requests"] for r in rank]
    assert requests or placement == "joint"
    by_prompt = {tuple(p) for p in prompt_ids}
    for r in requests:
        # no chat template here: added blocks go after the prompt the policy saw
        assert any(tuple(r.full_context[: len(p)]) in by_prompt for p in prompt_ids)
        assert 0 not in r.minus_contexts  # the format block sits in the (truncated) prompt text
    metrics = m.pop_metrics()
    assert metrics["mrtpo/skipped_pairs/prompt_ids_mismatch"] > 0


def test_recorded_spans_decide_which_blocks_are_cut(tiny_llama, char_tokenizer):
    """Issue 10 item 8 through the transport: the reference query also occurs in the prompt, but the task recorded
    it as not placed there, so it is added (and removed again) at the end, never cut from the prompt's text."""
    gen = MRTPOSamplesGenerator.__new__(MRTPOSamplesGenerator)
    gen.args = make_args()
    rng = random.Random(11)
    fmt, gold = "Answer in one SQL block.", "SELECT name FROM users"
    exps = []
    for gi in range(2):
        prompt_text = f"Example: {gold}. Question {gi}: list all users. {fmt}"
        prompt_ids = [3 + ord(c) % 98 for c in prompt_text]
        at = prompt_text.index(fmt)
        for i in range(4):
            resp = [rng.randrange(3, 101) for _ in range(rng.randint(3, 8))]
            values = [float(i % 2), 1.0, float(i < 2)]
            r = vllm_response(prompt_ids, resp, prompt_text, NAMES, values, [fmt, "", gold])
            r["extra_logs"]["mrtpo_reward_spans"] = [[at, at + len(fmt)], None, None]
            exps.append(gen._process_response_into_experience(r, max_len=256))
    m = maker(make_args(beta=0.5), tiny_llama, char_tokenizer)
    m.compute_advantages_and_returns(micro_batches(exps, 4, 0))
    ((_, kwargs),) = m.actor_model_group.calls
    requests = [r for rank in kwargs["requests"] for r in rank]
    enc = lambda text: char_tokenizer(text)["input_ids"]  # noqa: E731
    assert requests
    for r in requests:
        text_ids = r.full_context
        prompt_len = len(text_ids) - len(enc("\n" + gold))
        assert text_ids[prompt_len:] == enc("\n" + gold)  # the reference is added after the prompt
        assert r.minus_contexts[2] == text_ids[:prompt_len]  # and removed from there, the prompt left whole


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_reward_is_an_absent_reward(bad, tiny_llama, char_tokenizer):
    """Issue 10 item 2: one NaN/Inf reward value costs that response that reward; every advantage stays finite and
    equals the naive reference that leaves the value out of its group's statistics."""
    import naive_reference as ref

    samples = rollout(12)
    R, _ = rewards_in_order(samples)
    R[1, 2] = R[2, 2] = 0.0
    R[3, 2] = 1.0
    for s, row in zip(samples, R):
        for it, v in zip(vector(s).items, row.tolist()):
            it.value = v
    vector(samples[0]).items[2].value = bad
    samples[0].rewards = samples[0].rewards + bad  # the scalar sum is broken too
    m = maker(make_args(estimator="gdpo"), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
    present = [[True] * 3 for _ in range(len(R))]
    present[0][2] = False
    A = ref.group_advantages(R.tolist(), 4, present=present)
    S = [sum(row) for row in A]
    final = ref.batch_step([[x] for x in S], S)
    for e in out:
        assert torch.isfinite(e.advantages).all() and torch.isfinite(e.info["return"]).all()
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            assert torch.allclose(e.advantages[row][valid], torch.tensor(final[g][0]), atol=1e-5), g
    assert A[0][2] == 0.0 and A[3][2] != 0.0  # absent for response 0, still varying among the others
    assert m.pop_metrics()["mrtpo/nonfinite_rewards"] == 1.0


def test_json_list_rewards_with_length_penalty(tiny_llama, char_tokenizer):
    """Issue 10 item 9: (B, 1) rewards (upstream's tensor of a JSON-list reward) with a length penalty give the same
    advantages as (B,) rewards instead of raising."""

    def run(shape_b1):
        samples = rollout(13)
        for s in samples:
            if shape_b1:
                s.rewards = s.rewards.reshape(1, 1)
                s.info["reward"] = s.info["reward"].reshape(1, 1)
        args = make_args(estimator="gdpo")
        args.reward.overlong_buffer_len, args.reward.overlong_penalty_factor = 4, 1.0
        args.rollout.max_new_tokens = 10
        m = maker(args, tiny_llama, char_tokenizer)
        out = m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
        return {g: e.advantages[row] for e in out for row, g in enumerate(e.index)}

    flat, b1 = run(False), run(True)
    assert all(torch.isfinite(a).all() for a in b1.values())
    assert all(torch.equal(flat[g], b1[g]) for g in flat)


def reward_func_samples(fail_on, fresh_func_per_call=False):
    """Single-sample experiences scored by a contract reward function whose verifier raises on some queries."""
    from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, make_reward_func

    def score_one(query, prompt, label):
        if query in fail_on:
            raise RuntimeError("verifier crashed")
        items = [
            RewardItem("format", float(len(query) % 2)),
            RewardItem("execution", float(len(query) % 3 == 0), "SELECT 1"),
        ]
        return RewardVector(items, primary="execution", logs={"sql_has_query": 1.0})

    def make():
        return make_reward_func(score_one, lambda label: ["format", "execution"])

    func = make()
    gen = MRTPOSamplesGenerator.__new__(MRTPOSamplesGenerator)
    gen.args = make_args()
    rng = random.Random(14)
    samples = []
    for gi in range(2):
        prompt = f"Question {gi}: count."
        prompt_ids = [3 + ord(c) % 98 for c in prompt]
        for i in range(4):
            resp = [rng.randrange(3, 101) for _ in range(rng.randint(2, 7))]
            query = prompt + f" answer {gi}.{i}"
            out = (make() if fresh_func_per_call else func)([query], [prompt], ["label"])
            r = vllm_response(prompt_ids, resp, prompt, ["x"], [0.0], [""])
            r.update(reward=out["rewards"], scores=out["scores"], extra_logs=out["extra_logs"])
            samples.append(gen._process_response_into_experience(r, max_len=256))
    return gen, samples


def test_verifier_exception_costs_the_response_not_the_run(tiny_llama, char_tokenizer):
    """Issue 10 item 10: a verifier exception inside a micro-batch gives that response zero rewards; the batch's info
    entries keep one length and upstream's buffer accepts the experiences."""
    from openrlhf.trainer.ppo_utils.experience import split_experience_batch

    _, samples = reward_func_samples({"Question 0: count. answer 0.2"})
    assert samples[2].info["sql_has_query"].tolist() == [0.0]  # the fallback carries the task's numeric logs
    assert vector(samples[2]).values == [0.0, 0.0]
    m = maker(make_args(beta=0.5, use_kl_loss=True), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 4, 0))
    # the crashed response counts as [0, 0] in its group's normalization, the batch is otherwise untouched
    expected, _, _ = naive_advantages(samples, tiny_llama, char_tokenizer, 0.5, None)
    for e in out:
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            assert torch.allclose(e.advantages[row][valid], torch.tensor(expected[g]), atol=1e-4), g
        n = len(e.index)
        assert len(split_experience_batch(e)) == n
        assert all(len(v) == n for v in e.info.values())


def test_missing_logs_are_filled_across_the_rollout_batch(monkeypatch):
    """Issue 10 item 10, first call of a worker failing (no log keys known yet): the samples generator fills them."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    gen, samples = reward_func_samples({"Question 0: count. answer 0.0"}, fresh_func_per_call=True)
    assert "sql_has_query" not in samples[0].info
    monkeypatch.setattr(SamplesGenerator, "generate_samples", lambda self, **kw: (samples, None, 2, False))
    out, *_ = gen.generate_samples()
    assert out[0].info["sql_has_query"].tolist() == [0.0] and out[1].info["sql_has_query"].tolist() == [1.0]
    merged = Experience.concat_experiences(out, 0)
    assert merged.info["sql_has_query"].shape == (len(out),)


@pytest.mark.parametrize("estimator", ["gdpo", "mrtpo"])
def test_reward_clip_range_applies_to_the_response_advantage(estimator, tiny_llama, char_tokenizer):
    """Issue 10 item 4: --reward.clip_range clamps the response-level (normalized) advantage before it goes per
    token, as upstream's group estimators do; under mrtpo the placement's reallocation is kept."""
    import naive_reference as ref

    samples = rollout(15)
    R, _ = rewards_in_order(samples)
    args = make_args(estimator=estimator, beta=0.5)
    args.reward.clip_range = (-0.5, 0.7)
    m = maker(args, tiny_llama, char_tokenizer)
    clipped = {
        g: e.advantages[row][e.action_mask[row].bool()]
        for e in m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
        for row, g in enumerate(e.index)
    }
    args.reward.clip_range = None
    free = {
        g: e.advantages[row][e.action_mask[row].bool()]
        for e in maker(args, tiny_llama, char_tokenizer).compute_advantages_and_returns(
            micro_batches(rollout(15), 3, 0)
        )
        for row, g in enumerate(e.index)
    }
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(row) for row in A]
    level = [row[0] for row in ref.batch_step([[x] for x in S], S)]
    assert min(level) < -0.5 and max(level) > 0.7  # the clip binds on both sides
    for g, vals in clipped.items():
        want = min(max(level[g], -0.5), 0.7)
        assert vals.mean().item() == pytest.approx(want, abs=1e-4)
        assert torch.allclose(vals - vals.mean(), free[g] - free[g].mean(), atol=1e-5)  # placement kept


def test_cap_binding_frac_metric(monkeypatch, tiny_llama, char_tokenizer):
    """Issue 10 item 6: mrtpo/cap_binding_frac is the share of valid tokens where the cap changed the advantage,
    checked against a naive loop over the captured relevance."""
    import naive_reference as ref

    samples = rollout(16)
    R, blocks = rewards_in_order(samples)
    seen = capture_q(monkeypatch)
    m = maker(make_args(beta=1.0, cap=1.0), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 3, 5))
    A = ref.group_advantages(R.tolist(), 4)
    binds = tokens = 0
    for e, (q, mask) in zip(out, seen["calls"]):
        for row, g in enumerate(e.index):
            valid = mask[row]
            flags = ref.cap_binds(A[g], q[row][:, valid].tolist(), 1.0, 1.0)
            binds += sum(flags)
            tokens += len(flags)
    metric = m.pop_metrics()["mrtpo/cap_binding_frac"]
    assert binds > 0 and metric == pytest.approx(binds / tokens)


@pytest.mark.parametrize("estimator", ["gdpo", "mrtpo"])
def test_length_penalty_keeps_its_size(estimator, tiny_llama, char_tokenizer):
    """Issue 10 item 1: a DAPO overlong penalty p is added to its response's advantage at its own size (uniformly),
    after the normalizations: a -0.01 penalty only nudges, a -0.5 penalty moves by 0.5."""
    import naive_reference as ref

    samples = rollout(17)
    R, _ = rewards_in_order(samples)
    lengths = [int(s.response_length[0]) for s in samples]
    args = make_args(estimator=estimator, beta=0.5)
    args.rollout.max_new_tokens = 9
    args.reward.overlong_buffer_len, args.reward.overlong_penalty_factor = 4, 1.0
    m = maker(args, tiny_llama, char_tokenizer)
    out = {
        g: e.advantages[row][e.action_mask[row].bool()]
        for e in m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
        for row, g in enumerate(e.index)
    }
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(row) for row in A]
    level = [row[0] for row in ref.batch_step([[x] for x in S], S)]
    penalty = [-min(max(n - 5, 0), 4) / 4 for n in lengths]  # DAPO: -min(len - (max - buffer), buffer) / buffer
    assert any(p < 0 for p in penalty) and any(p == 0 for p in penalty)
    for g, vals in out.items():
        assert vals.mean().item() == pytest.approx(level[g] + penalty[g], abs=1e-4), g
    metrics = m.pop_metrics()
    assert metrics["reward/length_penalty/mean"] == pytest.approx(sum(penalty) / len(penalty))
    assert "reward/length_penalty/adv_std" not in metrics  # no reward column of its own


def test_saw_weights_per_reward_name(tiny_llama, char_tokenizer):
    """Issue 10 item 3: SAW statistics are taken per reward name, not per column position: two prompts holding the
    same constraints in different column orders get the same weight per constraint (naive loop reference)."""
    import naive_reference as ref

    samples = rollout(18)
    R, _ = rewards_in_order(samples)
    names = [["a", "b", "c"] if g < 4 else ["c", "a", "b"] for g in range(len(R))]
    for s, n in zip(samples, names):
        for it, name in zip(vector(s).items, n):
            it.name = name
    m = maker(make_args(estimator="gdpo", weighting="saw"), tiny_llama, char_tokenizer)
    out = {
        g: e.advantages[row][e.action_mask[row].bool()]
        for e in m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
        for row, g in enumerate(e.index)
    }
    cv = {}
    for name in "abc":
        vals = [R[g, k].item() for g in range(len(R)) for k in range(3) if names[g][k] == name]
        cv[name] = ref.bessel_std(vals) / (abs(ref.mean(vals)) + 1e-4)
    live = [n for n in cv if cv[n] > 0]
    w = {n: cv[n] * len(live) / sum(cv[x] for x in live) for n in cv}
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(w[names[g][k]] * A[g][k] for k in range(3)) for g in range(len(R))]
    level = [row[0] for row in ref.batch_step([[x] for x in S], S)]
    for g, vals in out.items():
        assert torch.allclose(vals, torch.tensor(level[g]), atol=1e-4), g


@pytest.mark.parametrize("cap", [None, 1.0, 2.0])
def test_central_path_against_naive_loops(cap, monkeypatch, tiny_llama, char_tokenizer):
    """The mrtpo path end to end through the experience maker (micro-batches shuffled) against plain loops written
    from README's formulas; only q is taken from the maker (the replay is checked in tests/core/test_replay.py)."""
    import naive_reference as ref

    samples = rollout(19, groups=3)
    R, blocks = rewards_in_order(samples)
    seen = capture_q(monkeypatch)
    m = maker(make_args(beta=0.7, cap=cap), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(samples, 5, 2))
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(row) for row in A]
    rows, expected = {}, {}
    for e, (q, mask) in zip(out, seen["calls"]):
        for row, g in enumerate(e.index):
            valid = mask[row]
            q_rows = q[row][:, valid].tolist()
            for k in range(3):  # only pairs with a varying reward and a block are replayed
                assert not any(q_rows[k]) or (A[g][k] != 0 and bool(blocks[g][k]))
            expected[g] = ref.capped_token_advantages(A[g], q_rows, 0.7, cap)
            rows[g] = e.advantages[row][valid]
    final = ref.batch_step([expected[g] for g in range(len(A))], S)
    assert any(len(set(round(x, 4) for x in final[g])) > 1 for g in rows)  # placement is not uniform
    for g, got in rows.items():
        assert torch.allclose(got, torch.tensor(final[g]), atol=1e-4), g


def test_mrtpo_at_beta_zero_equals_gdpo(tiny_llama, char_tokenizer):
    """beta = 0 (and the default cap) reproduces GDPO through the experience maker: max abs diff < 1e-6."""

    def run(estimator, beta):
        args = make_args(estimator=estimator, beta=beta, cap=2.0, use_kl_loss=False)
        exps = micro_batches(rollout(20), 3, 1)
        for e in exps:
            e.kl = torch.rand(e.action_mask.shape, generator=torch.Generator().manual_seed(e.index[0])) * e.action_mask
        m = maker(args, tiny_llama, char_tokenizer)
        return {g: e.advantages[row] for e in m.compute_advantages_and_returns(exps) for row, g in enumerate(e.index)}

    gdpo, mrtpo = run("gdpo", 0.5), run("mrtpo", 0.0)
    assert max(float((gdpo[g] - mrtpo[g]).abs().max()) for g in gdpo) < 1e-6


def test_replay_runs_in_eval_mode_with_dropout(char_tokenizer):
    """The replay must not see dropout: with a dropout model left in train mode the actor's replay is deterministic
    and the model is back in train mode afterwards."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mrtpo_openrlhf.core import request_from_ids

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_dropout=0.5,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    model.train()
    actor = fake_actor(model)
    req = request_from_ids(list(range(3, 20)), [[30, 31, 32], [40, 41]], list(range(50, 62)), [0, 1])
    kwargs = dict(
        requests=[req],
        min_forwards=0,
        num_rewards=2,
        temperature=1.0,
        micro_batch_size=2,
        chunk_size=4,
        js_kernel="eager",
    )
    q1, q2 = actor.replay_relevance(**kwargs), actor.replay_relevance(**kwargs)
    assert torch.equal(q1, q2) and (q1 > 0).any()
    assert model.training
    with torch.no_grad():  # the same model in train mode is not deterministic: the test can tell
        ids = torch.tensor([list(range(3, 30))])
        assert not torch.equal(model(ids).logits, model(ids).logits)


def test_advantage_dump(monkeypatch, tmp_path, tiny_llama, char_tokenizer):
    """$MRTPO_DUMP_ADVANTAGES receives each step's token advantages and GDPO's response-level value (e2e checks)."""
    monkeypatch.setenv("MRTPO_DUMP_ADVANTAGES", str(tmp_path))
    m = maker(make_args(beta=0.5), tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(rollout(21), 3, 0))
    dumped = torch.load(tmp_path / "step3.pt", weights_only=False)  # holds ReplayRequests
    assert dumped["estimator"] == "mrtpo" and dumped["beta"] == 0.5 and len(dumped["rows"]) == 8
    assert any("q" in r for r in dumped["rows"].values())
    for e in out:
        for row, g in enumerate(e.index):
            kept = dumped["rows"][g]
            assert torch.equal(kept["advantages"], e.advantages[row][e.action_mask[row].bool()])
            assert torch.equal(kept["final"], kept["advantages"])  # no KL term in this batch
            assert torch.equal(kept["sequence"], e.sequences[row][e.attention_mask[row].bool()])
            if "q" in kept:  # (K, response length): what the ranks returned for the request kept beside it
                assert kept["q"].shape[1] == len(kept["replay_request"].response_ids) and (kept["q"] >= 0).all()
            assert dumped["rows"][g]["advantages"].mean().item() == pytest.approx(dumped["rows"][g]["gdpo"], abs=1e-4)


def test_fixed_reward_weights_through_the_experience_maker(tiny_llama, char_tokenizer):
    """``--algo.mrtpo.reward_weights``: each reward's A weighted by its name's fixed weight on GDPO's response level
    (naive loop reference), the weights recorded in the metrics."""
    import naive_reference as ref

    samples = rollout(21)
    R, _ = rewards_in_order(samples)
    w = {"format": 0.25, "executable": 1.0, "execution": 3.0}
    m = maker(
        make_args(estimator="gdpo", reward_weights=(("format", 0.25), ("execution", 3.0))), tiny_llama, char_tokenizer
    )
    out = {
        g: e.advantages[row][e.action_mask[row].bool()]
        for e in m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
        for row, g in enumerate(e.index)
    }
    A = ref.group_advantages(R.tolist(), 4)
    S = [sum(w[NAMES[k]] * A[g][k] for k in range(3)) for g in range(len(R))]
    level = [row[0] for row in ref.batch_step([[x] for x in S], S)]
    for g, vals in out.items():
        assert torch.allclose(vals, torch.tensor(level[g]), atol=1e-4), g
    metrics = m.pop_metrics()
    assert metrics["mrtpo/reward_weight/format"] == 0.25 and metrics["mrtpo/reward_weight/execution"] == 3.0
    assert "mrtpo/reward_weight/executable" not in metrics  # not named: weight 1, nothing to record


def test_the_run_keeps_a_few_replayed_rows_for_its_credit_page(tiny_llama, char_tokenizer, tmp_path, monkeypatch):
    """Issue 49, item 14: the main job's output showed no trace of where each reward's advantage went. The rows it
    keeps are what training used (its q, its token advantages: nothing replayed again), and the page shows each
    reward's placed advantage, whose token mean is that reward's A (the placement moves credit, never adds it)."""
    from mrtpo_openrlhf.diagnostics import run_page

    monkeypatch.setenv("MRTPO_METRICS_JSONL", str(tmp_path / "metrics.jsonl"))
    args = make_args(beta=0.5, cap=None)
    m = maker(args, tiny_llama, char_tokenizer)
    out = m.compute_advantages_and_returns(micro_batches(rollout(0), 3, 0))
    rows = run_page.read_samples(tmp_path / run_page.SAMPLES_FILE)
    assert 1 <= len(rows) <= run_page.KEEP_ROWS and all(r["step"] == 3 and r["beta"] == 0.5 for r in rows)
    by_row = {g: (e, j) for e in out for j, g in enumerate(e.index)}
    for row in rows:
        e, j = by_row[row["row"]]
        mask = e.action_mask[j].bool()
        assert row["advantages"] == pytest.approx(e.advantages[j][mask].tolist(), abs=1e-4)
        assert len(row["tokens"]) == int(mask.sum()) == len(row["q"][0])
        assert "".join(row["tokens"]) == char_tokenizer.decode(e.sequences[j][1:][mask].tolist())
        assert any(max(qk) > 0 for qk in row["q"])
        for a_k, placed in zip(row["group_advantages"], run_page.reward_token_advantages(row)):
            assert statistics.mean(placed) == pytest.approx(a_k, abs=1e-4)
    page = run_page.render(tmp_path / run_page.SAMPLES_FILE, tmp_path / run_page.PAGE_FILE)
    text = page.read_text()
    assert text.count('class="card"') == len(rows) and "token advantage this reward placed" in text


@pytest.mark.parametrize("measure", ["loggap", "js-contrast"])
def test_each_relevance_measure_through_the_experience_maker(
    measure, monkeypatch, tmp_path, tiny_llama, char_tokenizer
):
    """``--algo.mrtpo.relevance`` reaches every rank's replay; the q the ranks return equals the measure's fp64 loop
    over tokens (tests/naive_relevance.py) and the token advantages the naive loops' on it. js-contrast's requests
    carry the null context of the task whose reward file the run uses (SQL's: appended); loggap's carry none."""
    import naive_reference as ref
    import naive_relevance as naive

    from mrtpo_openrlhf.paths import REPO_ROOT
    from mrtpo_openrlhf.tasks import TASKS

    args = make_args(beta=0.5, cap=2.0, relevance=measure)
    args.reward.remote_url = str(REPO_ROOT / "reward_funcs" / "sql.py")
    samples = rollout(0)
    m = maker(args, tiny_llama, char_tokenizer)
    monkeypatch.setenv(em.DUMP_ENV, str(tmp_path))
    out = m.compute_advantages_and_returns(micro_batches(samples, 3, 0))
    dumped = torch.load(tmp_path / "step3.pt", weights_only=False)["rows"]
    ((_, kwargs),) = m.actor_model_group.calls
    assert kwargs["relevance"] == [measure, measure]
    sent = [r for rank in kwargs["requests"] for r in rank]
    null = TASKS["sql"].null_block() if measure == "js-contrast" else None
    assert sent and all((r.null_context is not None) == (null is not None) for r in sent)

    model64 = naive.fp64_model(tiny_llama)
    R, blocks = rewards_in_order(samples)
    A = ref.group_advantages(R.tolist(), 4)
    rows = []
    for i, s in enumerate(samples):
        _, resp, _ = response_span(s.sequences[0], s.attention_mask[0], s.action_mask[0])
        ks = [k for k in range(R.shape[1]) if A[i][k] != 0 and blocks[i][k]]
        req = request_from_text(char_tokenizer, s.prompts[0], blocks[i], resp, ks, "\n", null=null)
        q = [[0.0] * len(resp) for _ in range(R.shape[1])]
        for k in req.minus_contexts:
            q[k] = naive.q(model64, req, k, measure, tau=0.9)
            assert torch.allclose(dumped[i]["q"][k].double(), torch.tensor(q[k], dtype=torch.float64), atol=2e-6)
        rows.append(ref.capped_token_advantages(A[i], q, 0.5, 2.0))
    expected = ref.batch_step(rows, [sum(a) for a in A])
    # q / mean(q) magnifies q's last bits where the floored contrast leaves a few small values: 1e-3 there
    atol = 1e-3 if measure == "js-contrast" else 1e-4
    for e in out:
        for row, g in enumerate(e.index):
            valid = e.action_mask[row].bool()
            assert torch.allclose(e.advantages[row][valid], torch.tensor(expected[g]), atol=atol), g
