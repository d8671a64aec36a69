"""Prefix-shared replay: the same q as replaying every context whole, with fewer tokens forwarded."""

import logging

import pytest
import torch

from mrtpo_openrlhf.core import (
    JOINT,
    ReplayRequest,
    count_forwards,
    prefix_sharing_unsupported,
    replay_relevance,
    request_from_ids,
    shared_prefix_length,
)

VOCAB = 101  # tests/conftest.py's tiny_llama


def rand_ids(g, n):
    return torch.randint(3, VOCAB, (n,), generator=g).tolist()


def mixed_requests(seed=0):
    """Appended blocks, inline blocks (one at token 0: no shared prefix), a minus context that is a prefix
    of full, a one-token response, a joint ablation, and responses/prompts of varied length."""
    g = torch.Generator().manual_seed(seed)
    reqs = []
    for plen, rlen, insert_at in [(9, 6, 7), (4, 11, None), (13, 1, 5), (30, 8, None), (6, 17, 0), (21, 3, 20)]:
        blocks = [rand_ids(g, n) for n in (3, 0, 5)]
        reqs.append(request_from_ids(rand_ids(g, plen), blocks, rand_ids(g, rlen), [0, 1, 2], insert_at))
    reqs.append(
        request_from_ids(
            rand_ids(g, 12), [rand_ids(g, 2), [], rand_ids(g, 4)], rand_ids(g, 9), [0, 2], None, joint=True
        )
    )
    return reqs


def naive_prefix_length(contexts):
    n = 0
    while all(len(c) > n + 1 for c in contexts) and len({c[n] for c in contexts}) == 1:
        n += 1
    return n


def test_shared_prefix_length_against_a_naive_scan():
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        base = torch.randint(0, 3, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
        ctxs = [
            base[: int(torch.randint(1, len(base) + 1, (1,), generator=g))]
            + torch.randint(0, 3, (int(torch.randint(0, 3, (1,), generator=g)),), generator=g).tolist()
            for _ in range(3)
        ]
        ctxs = [c or [0] for c in ctxs]
        assert shared_prefix_length(ctxs) == naive_prefix_length(ctxs), ctxs
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # keeps the last token of the shorter one


@pytest.mark.parametrize("mbs", [1, 2, 5])
def test_shared_equals_unshared_fp32(tiny_llama, mbs):
    reqs = mixed_requests()
    q_ref, n_ref = replay_relevance(
        tiny_llama, reqs, num_rewards=3, temperature=0.7, micro_batch_size=mbs, share_prefix=False
    )
    q, n = replay_relevance(tiny_llama, reqs, num_rewards=3, temperature=0.7, micro_batch_size=mbs)
    assert n == count_forwards(reqs, mbs) and n_ref == count_forwards(reqs, mbs, share_prefix=False)
    assert n >= n_ref
    assert (q_ref > 0).sum() > 40  # the comparison is not between zeros
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    assert torch.equal(q == 0, q_ref == 0)


def test_shared_equals_unshared_bf16(tiny_llama):
    import copy

    model = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    reqs = mixed_requests(seed=1)
    q_fp32, _ = replay_relevance(tiny_llama, reqs, num_rewards=3, share_prefix=False)
    q_ref, _ = replay_relevance(model, reqs, num_rewards=3, share_prefix=False)
    q, _ = replay_relevance(model, reqs, num_rewards=3)
    # bf16 rounding of the two paths differs (the cache is reused, not recomputed); both stay within
    # bf16 noise of the fp32 profile
    tol = 2 * float((q_ref - q_fp32).abs().max()) + 1e-3
    assert float((q - q_fp32).abs().max()) <= tol
    assert float((q - q_ref).abs().mean()) <= 0.01


def test_each_prefix_runs_once(tiny_llama):
    """Input tokens forwarded (real, not padding) = per response its prefix once + every branch."""
    reqs = mixed_requests()
    seen = []
    hook = tiny_llama.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    try:
        replay_relevance(tiny_llama, reqs, micro_batch_size=1, num_rewards=3)
    finally:
        hook.remove()
    expected = 0
    for req in reqs:
        full = list(req.full_context)
        ctxs = [full] + [list(c) for c in req.minus_contexts.values() if list(c) != full]
        if len(ctxs) == 1 or not req.response_ids:
            continue
        p = naive_prefix_length(ctxs)
        expected += p + sum(len(c) - p + len(req.response_ids) - 1 for c in ctxs)
    assert sum(seen) == expected  # micro-batch 1: no padding anywhere
    unshared = sum(
        len(c) + len(r.response_ids) - 1
        for r in reqs
        for c in [r.full_context] + list(r.minus_contexts.values())
        if r.response_ids and r.minus_contexts
    )
    assert sum(seen) < unshared


def test_similar_lengths_batched_together(tiny_llama):
    """Four short and four long prompts, shuffled: with sorting, a prefix forward never mixes them."""
    g = torch.Generator().manual_seed(2)
    lens = [5, 60, 6, 61, 7, 62, 8, 63]
    reqs = [request_from_ids(rand_ids(g, n), [rand_ids(g, 3)], rand_ids(g, 4), [0]) for n in lens]
    widths = []
    hook = tiny_llama.model.embed_tokens.register_forward_hook(lambda m, args, out: widths.append(args[0].shape))
    try:
        replay_relevance(tiny_llama, reqs, micro_batch_size=4, num_rewards=1)
    finally:
        hook.remove()
    prefix_widths = sorted(s[1] for s in widths if s[0] == 4 and s[1] > 10)
    # prefix = prompt minus its last token (minus_0 = the prompt): the long ones together, the short ones too
    assert prefix_widths == [62], widths
    assert any(s == (4, 7) for s in widths), widths


class NoConfig(torch.nn.Module):
    """A causal LM without a transformers config (cannot be checked for cache support)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kwargs):
        if "past_key_values" in kwargs:
            raise AssertionError("the fallback must not pass a cache")
        return self.inner(**kwargs)


def test_fallback_logs_reason_and_keeps_q_and_forward_guard(tiny_llama, caplog):
    reqs = mixed_requests()
    wrapped = NoConfig(tiny_llama)
    assert prefix_sharing_unsupported(wrapped) is not None and prefix_sharing_unsupported(tiny_llama) is None
    q_ref, _ = replay_relevance(tiny_llama, reqs, num_rewards=3, micro_batch_size=2)
    shared_count = count_forwards(reqs, 2)
    with caplog.at_level(logging.WARNING, logger="mrtpo_openrlhf.core.replay"):
        q, n = replay_relevance(wrapped, reqs, num_rewards=3, micro_batch_size=2, min_forwards=shared_count)
    assert "without prefix sharing" in caplog.text and "config" in caplog.text
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    # a falling-back rank still runs exactly the agreed count (dummies fill the gap): ZeRO-3 stays in step
    assert n == shared_count > count_forwards(reqs, 2, share_prefix=False)


def test_sliding_window_and_unknown_attention_fall_back(tiny_llama):
    import copy

    model = copy.deepcopy(tiny_llama)
    model.config.layer_types = ["sliding_attention"] * 2
    assert "layer types" in prefix_sharing_unsupported(model)
    model = copy.deepcopy(tiny_llama)
    model.config._attn_implementation = "flex_attention"
    assert "flex_attention" in prefix_sharing_unsupported(model)


def test_joint_key_shared(tiny_llama):
    req = mixed_requests()[-1]
    assert list(req.minus_contexts) == [JOINT]
    q, _ = replay_relevance(tiny_llama, [req], num_rewards=3)
    q_ref, _ = replay_relevance(tiny_llama, [req], num_rewards=3, share_prefix=False)
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    assert torch.equal(q[0, 0], q[0, 2]) and (q[0, 0] > 0).any() and (q[0, 1] == 0).all()


def test_empty_and_unreplayable_requests(tiny_llama):
    empty = ReplayRequest([1, 2, 3], [], {0: [1, 3]})
    same = ReplayRequest([1, 2, 3], [4, 5], {0: [1, 2, 3]})
    q, n = replay_relevance(tiny_llama, [empty, same], num_rewards=1)
    assert n == 0 == count_forwards([empty, same], 4) and (q == 0).all()


def test_minus_branch_longer_than_full_waits_for_it(tiny_llama):
    """Branches run longest first; a minus context longer than full (tokenization can do that) comes
    before its full and must wait for it."""
    g = torch.Generator().manual_seed(4)
    prompt, resp = rand_ids(g, 10), rand_ids(g, 6)
    req = ReplayRequest(prompt, resp, {0: prompt[:4] + rand_ids(g, 9) + prompt[4:], 1: prompt[:7]})
    q, _ = replay_relevance(tiny_llama, [req], num_rewards=2, micro_batch_size=1)
    q_ref, _ = replay_relevance(tiny_llama, [req], num_rewards=2, micro_batch_size=1, share_prefix=False)
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    assert (q[0] > 0).any(dim=1).all()


def test_responses_to_one_prompt_share_one_prefix_forward(tiny_llama):
    """A GRPO group: several responses to one prompt, each with its own appended blocks (the SQLite error)
    and a shared one (the reference query). The prompt runs once for the whole group."""
    g = torch.Generator().manual_seed(6)
    prompt, reference = rand_ids(g, 40), rand_ids(g, 5)
    reqs = [
        request_from_ids(
            prompt, [rand_ids(g, 3 + i), reference], rand_ids(g, 6 + 2 * i), [0, 1] if i % 2 else [1], insert_at=37
        )
        for i in range(5)
    ]
    other = request_from_ids(rand_ids(g, 30), [rand_ids(g, 4), []], rand_ids(g, 5), [0])
    reqs.insert(2, other)
    shapes = []
    hook = tiny_llama.model.embed_tokens.register_forward_hook(lambda m, args, out: shapes.append(args[0].shape))
    try:
        q, n = replay_relevance(tiny_llama, reqs, num_rewards=2, micro_batch_size=4)
    finally:
        hook.remove()
    assert n == len(shapes) == count_forwards(reqs, 4)
    prefix_forwards = [s for s in shapes if s[1] >= 29]
    assert prefix_forwards == [torch.Size([2, 37])], shapes  # one row per prompt: the group's and the other one's
    q_ref, _ = replay_relevance(tiny_llama, reqs, num_rewards=2, micro_batch_size=4, share_prefix=False)
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    assert (q_ref > 0).sum() > 20


def test_unpadded_batches_run_without_a_mask(tiny_llama):
    """Equal prompt, block and response lengths: no row is padded, so no forward needs a mask, and q is the same."""
    g = torch.Generator().manual_seed(7)
    reqs = [
        request_from_ids(rand_ids(g, 20), [rand_ids(g, 3), rand_ids(g, 3)], rand_ids(g, 6), [0, 1], insert_at=18)
        for _ in range(4)
    ]
    masks = []
    hook = tiny_llama.register_forward_pre_hook(
        lambda m, args, kwargs: masks.append(kwargs.get("attention_mask")), with_kwargs=True
    )
    try:
        q, _ = replay_relevance(tiny_llama, reqs, num_rewards=2, micro_batch_size=4)
    finally:
        hook.remove()
    assert masks and all(m is None for m in masks)
    q_ref, _ = replay_relevance(tiny_llama, reqs, num_rewards=2, micro_batch_size=1, share_prefix=False)
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
    assert (q_ref > 0).sum() > 20


def test_eager_attention_shares_the_prefix_too(tiny_llama):
    import copy

    model = copy.deepcopy(tiny_llama)
    model.set_attn_implementation("eager")
    assert prefix_sharing_unsupported(model) is None
    reqs = mixed_requests(seed=2)
    q, _ = replay_relevance(model, reqs, num_rewards=3, micro_batch_size=3)
    q_ref, _ = replay_relevance(tiny_llama, reqs, num_rewards=3, micro_batch_size=3, share_prefix=False)
    torch.testing.assert_close(q, q_ref, atol=2e-5, rtol=0)
