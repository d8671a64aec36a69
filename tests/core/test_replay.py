"""Replay on a tiny random Llama: batched + left-padded + logits_to_keep == naive per-sample."""

import pytest
import torch

from mrtpo_openrlhf.core import (
    JOINT,
    PROMPT_IDS_MISMATCH,
    ReplayRequest,
    context_ids,
    context_texts,
    count_forwards,
    find_insert_position,
    js_relevance,
    localization,
    replay_relevance,
    request_for_rollout,
    request_from_ids,
    request_from_text,
    tokens_for_mass,
)

VOCAB = 101  # tests/conftest.py's tiny_llama


@pytest.fixture(scope="module")
def model(tiny_llama):
    return tiny_llama


def rand_ids(g, n):
    return torch.randint(3, VOCAB, (n,), generator=g).tolist()


def make_requests(seed=0):
    g = torch.Generator().manual_seed(seed)
    reqs = []
    for i, (plen, rlen, k) in enumerate([(9, 6, 3), (4, 11, 3), (13, 1, 3), (7, 8, 3), (5, 0, 3)]):
        blocks = [rand_ids(g, n) for n in (3, 0, 5)][:k]  # block 1 empty
        reqs.append(
            request_from_ids(
                rand_ids(g, plen), blocks, rand_ids(g, rlen), rewards=[0, 1, 2] if i != 3 else [2], insert_at=plen - 2
            )
        )
    return reqs


@torch.no_grad()
def naive_q(model, req, k, temperature):
    """Unpadded, full-logits, one sample at a time."""

    def resp_logits(ctx):
        ids = torch.tensor([ctx + list(req.response_ids)])
        logits = model(input_ids=ids).logits[0]
        return logits[len(ctx) - 1 : len(ctx) - 1 + len(req.response_ids)]

    full = resp_logits(list(req.full_context))
    minus = resp_logits(list(req.minus_contexts[k]))
    return js_relevance(full, minus, temperature=temperature)


@pytest.mark.parametrize("mbs", [1, 3, 16])
def test_batched_equals_naive(model, mbs):
    reqs = make_requests()
    q, forwards = replay_relevance(model, reqs, temperature=0.8, micro_batch_size=mbs, chunk_size=3)
    assert q.shape == (5, 3, 11)
    assert forwards == count_forwards(reqs, mbs)
    for i, req in enumerate(reqs):
        n = len(req.response_ids)
        for k in range(3):
            if k in req.minus_contexts and n:
                ref = naive_q(model, req, k, 0.8)
                assert torch.allclose(q[i, k, :n], ref, atol=2e-5), (i, k)
            else:
                assert (q[i, k] == 0).all()
        assert (q[i, :, n:] == 0).all()
    # an empty block leaves full == minus_k: exactly zero relevance
    assert (q[:, 1] == 0).all()
    assert (q[0, 0, :6] > 0).any() and (q[0, 2, :6] > 0).any()


def test_removing_a_block_matters_only_for_that_block(model):
    g = torch.Generator().manual_seed(5)
    prompt, resp = rand_ids(g, 6), rand_ids(g, 7)
    blocks = [rand_ids(g, 4), rand_ids(g, 4)]
    same = request_from_ids(prompt, [blocks[0], []], resp, rewards=[0, 1])
    assert 1 not in same.minus_contexts  # an empty block needs no replay
    q, _ = replay_relevance(model, [same], num_rewards=2)
    # a minus context that equals full is skipped and gives exactly 0
    forced = ReplayRequest(same.full_context, resp, {0: same.minus_contexts[0], 1: same.full_context})
    q2, forwards = replay_relevance(model, [forced])
    assert forwards == count_forwards([forced], 4) == 2  # one prefix forward + one branch forward (full, minus_0)
    assert torch.allclose(q2, q, atol=1e-6)
    q3, forwards = replay_relevance(model, [forced], share_prefix=False)
    assert forwards == count_forwards([forced], 4, share_prefix=False) == 1
    assert torch.allclose(q3, q, atol=2e-5) and (q3[0, 1] == 0).all()
    assert (q[0, 1] == 0).all() and (q[0, 0] > 0).all()


def test_joint_profile_written_to_each_reward(model):
    g = torch.Generator().manual_seed(1)
    reqs = [
        request_from_ids(
            rand_ids(g, 6), [rand_ids(g, 3), [], rand_ids(g, 4)], rand_ids(g, 5), rewards=[0, 1, 2], joint=True
        )
        for _ in range(2)
    ]
    assert reqs[0].joint_rewards == [0, 2] and list(reqs[0].minus_contexts) == [JOINT]
    q, forwards = replay_relevance(model, reqs, micro_batch_size=2, num_rewards=3)
    assert forwards == count_forwards(reqs, 2) == 3  # one prefix forward (both responses) + 4 branches in 2
    assert count_forwards(reqs, 2, share_prefix=False) == 2
    assert torch.equal(q[0, 0], q[0, 2]) and (q[0, 0] > 0).any() and (q[0, 1] == 0).all()
    ref = naive_q(model, reqs[0], JOINT, 1.0)
    assert torch.allclose(q[0, 0], ref, atol=2e-5)


def test_fixed_forward_count_pads_with_dummies(model):
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        _, forwards = replay_relevance(model, make_requests()[:1], micro_batch_size=8, min_forwards=4, num_rewards=3)
        assert forwards == 4 and len(calls) == 4
        calls.clear()
        _, forwards = replay_relevance(model, [], min_forwards=3)
        assert forwards == 3 and len(calls) == 3
    finally:
        handle.remove()


def test_insert_position_before_chat_suffix():
    suffix = [50, 51, 52]
    assert find_insert_position([1, 2, 3, 50, 51, 52], suffix_ids=suffix) == 3
    assert find_insert_position([1, 2, 3], suffix_ids=suffix) == 3
    with pytest.raises(ValueError):
        context_ids([1, 2], [[3]], insert_at=5)


def test_text_contexts_cut_inline_blocks_and_add_the_others():
    prompt = "<u>Write a poem. Use no commas. End with 'Bye'.</u><a>"
    blocks = ["Use no commas.", "Reference: SELECT 1", ""]
    full, minus, none = context_texts(prompt, blocks, separator="\n", suffix="</u><a>")
    assert full == "<u>Write a poem. Use no commas. End with 'Bye'.\nReference: SELECT 1</u><a>"
    assert minus[0] == "<u>Write a poem.  End with 'Bye'.\nReference: SELECT 1</u><a>"
    assert minus[1] == prompt and minus[2] == full
    assert none == "<u>Write a poem.  End with 'Bye'.</u><a>"


def test_block_counts_as_in_prompt_only_at_its_recorded_span():
    """Issue 10 item 8: a reference query that also occurs in the system prompt is not cut from there."""
    system = "<s>Example: SELECT 1</s>"
    user = "<u>Write SQL. Use one sql block.</u><a>"
    prompt = system + user
    blocks = ["Use one sql block.", "SELECT 1"]
    fmt = prompt.index(blocks[0])
    full, minus, none = context_texts(
        prompt, blocks, separator="\n", suffix="</u><a>", spans=[(fmt, fmt + len(blocks[0])), None]
    )
    assert full == system + "<u>Write SQL. Use one sql block.\nSELECT 1</u><a>"
    assert minus[0] == system + "<u>Write SQL. \nSELECT 1</u><a>"
    assert minus[1] == prompt  # the system prompt's occurrence stays
    assert none == system + "<u>Write SQL. </u><a>"
    # the same block placed twice: only the recorded occurrence is cut
    twice = "<u>Use one sql block. Really: Use one sql block.</u><a>"
    second = twice.rindex(blocks[0])
    _, minus, _ = context_texts(twice, blocks[:1], "\n", "</u><a>", spans=[(second, second + len(blocks[0]))])
    assert minus[0] == "<u>Use one sql block. Really: </u><a>"
    with pytest.raises(ValueError, match="does not hold its text"):
        context_texts(prompt, blocks, "\n", "</u><a>", spans=[(0, 5), None])


def test_request_from_text_keeps_response_ids(model):
    class Tok:
        chat_template = None

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [3 + ord(c) % 90 for c in text]}

    response = [5, 6, 7, 8]
    req = request_from_text(Tok(), "Say hi. No commas.", ["No commas.", "", "gold: hi"], response, [0, 1, 2])
    assert req.response_ids == response and sorted(req.minus_contexts) == [0, 2]
    q, _ = replay_relevance(model, [req], num_rewards=3)
    assert (q[0, 1] == 0).all() and (q[0, 0] > 0).any() and (q[0, 2] > 0).any()


class CharTok:
    """One id per character; the chat template's suffix is ``</u><a>``."""

    chat_template = "x"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + ord(c) % 90 for c in text]}

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "<u>" + messages[-1]["content"] + "</u><a>"


def test_rollout_request_starts_from_the_rollout_prompt_ids():
    """Issue 10 item 7: a prompt the rollout truncated is replayed as the policy saw it, not from its text."""
    tok = CharTok()
    prompt = "<u>Schema: users(name). Question: list users. Use no commas.</u><a>"
    blocks = ["Use no commas.", "", "gold: SELECT name FROM users"]
    enc = lambda text: tok(text)["input_ids"]  # noqa: E731
    response = [5, 6, 7]

    # untruncated: the text contexts, whose full context is the prompt ids plus the added block
    req, skipped = request_for_rollout(tok, prompt, enc(prompt), blocks, response, [0, 2], "\n")
    assert skipped == {} and req.full_context == enc(prompt.replace("</u><a>", "\ngold: SELECT name FROM users</u><a>"))

    truncated = enc(prompt)[12:]  # upstream keeps the last tokens of an over-long prompt
    req, skipped = request_for_rollout(tok, prompt, truncated, blocks, response, [0, 2], "\n")
    added = enc("\ngold: SELECT name FROM users")
    cut = len(truncated) - len(enc("</u><a>"))
    assert req.full_context == truncated[:cut] + added + truncated[cut:]
    assert req.minus_contexts == {2: truncated}
    assert skipped == {0: PROMPT_IDS_MISMATCH}  # the in-prompt block cannot be cut from ids that lost their text
    assert req.response_ids == response

    joint, skipped = request_for_rollout(tok, prompt, truncated, blocks, response, [0, 2], "\n", joint=True)
    assert joint.minus_contexts == {} and skipped == {0: PROMPT_IDS_MISMATCH, 2: PROMPT_IDS_MISMATCH}


def test_localization_statistics():
    mask = torch.ones(1, 10, dtype=torch.bool)
    q = torch.zeros(1, 10)
    q[0, 0] = 1.0
    assert localization(q, mask).item() == pytest.approx(1.0)
    assert tokens_for_mass(q, mask).item() == pytest.approx(0.1)
    flat = torch.ones(1, 10)
    assert localization(flat, mask).item() == pytest.approx(0.2)
    assert tokens_for_mass(flat, mask).item() == pytest.approx(0.8)
    assert torch.isnan(localization(torch.zeros(1, 10), mask)).all()


def test_fp32_logits_come_from_the_models_last_hidden_state_in_fp32(tiny_llama):
    """``fp32_logits``: the bf16 model's logits computed in fp32 from its own (bf16) last hidden state, unrounded;
    the model is as before afterwards. The replay with ``logits_fp32`` runs the same forwards."""
    import copy

    from mrtpo_openrlhf.core.replay import fp32_logits

    model = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    before = model(input_ids=ids).logits
    with fp32_logits(model):
        out = model(input_ids=ids, output_hidden_states=True)
    hidden = out.hidden_states[-1]  # after the final norm, in bf16: the output layer's input
    assert hidden.dtype == torch.bfloat16 and out.logits.dtype == torch.float32
    ref = hidden.double() @ model.get_output_embeddings().weight.double().T
    assert torch.allclose(out.logits.double(), ref, rtol=1e-5, atol=1e-5)
    assert (out.logits - before.float()).abs().max() > 0  # bf16 rounding of the logits is gone
    assert torch.equal(model(input_ids=ids).logits, before)  # restored

    reqs = [request_from_ids([4, 8, 15], [[16, 23], [42]], [7, 3, 9, 5], [0, 1])]
    q_flag, n_flag = replay_relevance(model, reqs, num_rewards=2, logits_fp32=True, js_kernel="eager")
    with fp32_logits(model):
        q_ctx, n_ctx = replay_relevance(model, reqs, num_rewards=2, js_kernel="eager")
    assert torch.equal(q_flag, q_ctx) and n_flag == n_ctx
