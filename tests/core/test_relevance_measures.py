"""The relevance registry and its measures against fp64 loops over tokens (``tests/naive_relevance.py``): the
batched, prefix-shared and unshared replays; loggap's output layer (the sampled token's log-probability, a chunk of
positions at a time) against the full-vocabulary log-softmax; the null context's text and place."""

import math

import naive_relevance as naive
import pytest
import torch

from mrtpo_openrlhf.core import (
    JOINT,
    NULL_TEXT,
    RELEVANCE,
    NullBlock,
    context_texts,
    count_forwards,
    get_relevance,
    null_context_text,
    register_relevance,
    relevance_arms,
    relevance_names,
    replay_relevance,
    request_for_rollout,
    request_from_ids,
    request_from_text,
    sampled_token_log_probs,
)
from mrtpo_openrlhf.core.null_block import APPENDED, INLINE
from mrtpo_openrlhf.core.relevance import DISTRIBUTIONS, TOKEN_LOG_PROBS

VOCAB = 101  # tests/conftest.py's tiny_llama
MEASURES = ("js", "loggap", "js-contrast")


@pytest.fixture(scope="module")
def model64(tiny_llama):
    return naive.fp64_model(tiny_llama)


def requests(seed=0, joint=False):
    """Five responses of uneven lengths (one empty), three rewards (one with an empty block), each with a null."""
    g = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(3, VOCAB, (n,), generator=g).tolist()  # noqa: E731
    out = []
    for plen, rlen in [(9, 6), (4, 11), (13, 1), (7, 8), (5, 0)]:
        blocks = [ids(3), [], ids(5)]
        out.append(request_from_ids(ids(plen), blocks, ids(rlen), [0, 1, 2], plen - 2, joint, null_ids=ids(4)))
    return out


def test_the_shipped_measures_and_what_they_replay():
    assert relevance_names()[:3] == MEASURES
    assert get_relevance("js").output == DISTRIBUTIONS and not get_relevance("js").null_context
    assert get_relevance("loggap").output == TOKEN_LOG_PROBS and not get_relevance("loggap").null_context
    assert get_relevance("js-contrast").output == DISTRIBUTIONS and get_relevance("js-contrast").null_context
    assert relevance_arms() == {"mrtpo-loggap": "loggap", "mrtpo-contrast": "js-contrast"}


def test_the_registry_refuses_a_taken_name_or_arm_and_names_the_choices():
    with pytest.raises(ValueError, match="already registered"):
        register_relevance("js", DISTRIBUTIONS, "again")
    with pytest.raises(ValueError, match="already taken"):
        register_relevance("toy", DISTRIBUTIONS, "toy", arm="mrtpo-loggap")
    with pytest.raises(ValueError, match="output"):
        register_relevance("toy", "hidden_states", "toy")
    with pytest.raises(ValueError, match="go together"):
        register_relevance("toy", DISTRIBUTIONS, "toy", null_context=True)
    with pytest.raises(ValueError, match="choose from"):
        get_relevance("kl")
    assert "toy" not in RELEVANCE


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("share_prefix,mbs", [(True, 1), (True, 3), (False, 2), (True, 16)])
def test_replay_matches_the_fp64_loop_over_tokens(tiny_llama, model64, measure, share_prefix, mbs):
    reqs = requests()
    tau = 0.7
    q, forwards = replay_relevance(
        tiny_llama, reqs, num_rewards=3, temperature=tau, micro_batch_size=mbs, share_prefix=share_prefix,
        relevance=measure,
    )  # fmt: skip
    with_null = measure == "js-contrast"
    counted = [r if with_null else type(r)(r.full_context, r.response_ids, r.minus_contexts) for r in reqs]
    assert forwards == count_forwards(counted, mbs, share_prefix)
    for i, req in enumerate(reqs):
        n = len(req.response_ids)
        for k in range(3):
            if k not in req.minus_contexts or n == 0:
                assert (q[i, k] == 0).all()
                continue
            ref = torch.tensor(naive.q(model64, req, k, measure, tau), dtype=torch.float64)
            assert torch.allclose(q[i, k, :n].double(), ref, atol=2e-6, rtol=1e-4), (measure, i, k)
            assert (q[i, k, n:] == 0).all()
    assert q.min() >= 0 and q.max() <= 1


def test_contrast_is_floored_at_zero_and_a_response_without_signal_stays_zero(tiny_llama, model64):
    """A null context equal to a reward's minus context cancels that reward's q (up to the batching's last bits;
    nothing left: zero, which the placement turns into uniform weights)."""
    reqs = requests()
    same = [
        type(r)(r.full_context, r.response_ids, r.minus_contexts, null_context=r.minus_contexts[2]) for r in reqs[:4]
    ]
    q, _ = replay_relevance(tiny_llama, same, num_rewards=3, relevance="js-contrast")
    assert q[:, 2].max() < 1e-6 and q[:, 2].min() == 0
    assert (q[:, 0] >= 0).all() and (q[:, 0] > 0).any()
    contrast = RELEVANCE["js-contrast"].contrast
    assert contrast(torch.tensor([0.3, 0.1, 0.2]), torch.tensor([0.1, 0.3, 0.2])).tolist() == pytest.approx([0.2, 0, 0])
    from mrtpo_openrlhf.core import credit_weights

    w = credit_weights(contrast(torch.full((1, 4), 0.1), torch.full((1, 4), 0.2)), torch.ones(1, 4), beta=0.5)
    assert torch.equal(w, torch.ones(1, 4))  # nothing left: uniform


def test_joint_context_with_a_contrast(tiny_llama, model64):
    reqs = requests(joint=True)
    q, _ = replay_relevance(tiny_llama, reqs, num_rewards=3, relevance="js-contrast")
    req = reqs[0]
    n = len(req.response_ids)
    ref = naive.q(model64, req, JOINT, "js-contrast")
    for k in req.joint_rewards:
        assert torch.allclose(q[0, k, :n].double(), torch.tensor(ref, dtype=torch.float64), atol=2e-6)


def test_a_contrast_without_null_contexts_is_refused(tiny_llama):
    reqs = [type(r)(r.full_context, r.response_ids, r.minus_contexts) for r in requests()]
    with pytest.raises(ValueError, match="null"):
        replay_relevance(tiny_llama, reqs, num_rewards=3, relevance="js-contrast")


def test_js_ignores_the_null_context(tiny_llama):
    """The JS replay is the same with or without null contexts in the requests (it never runs them)."""
    reqs = requests()
    bare = [type(r)(r.full_context, r.response_ids, r.minus_contexts) for r in reqs]
    q1, n1 = replay_relevance(tiny_llama, reqs, num_rewards=3)
    q2, n2 = replay_relevance(tiny_llama, bare, num_rewards=3)
    assert torch.equal(q1, q2) and n1 == n2


# ── loggap's output layer ──


@pytest.mark.parametrize("dtype,fp32", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("chunk", [1, 3, 256])
def test_sampled_token_log_probs_against_the_full_vocabulary(dtype, fp32, chunk):
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 7, 16, generator=g).to(dtype)
    weight = (torch.randn(50, 16, generator=g) * 2).to(dtype)
    bias = torch.randn(50, generator=g).to(dtype)
    targets = torch.randint(0, 50, (2, 7), generator=g)
    got = sampled_token_log_probs(hidden, weight, bias, targets, temperature=0.7, chunk_size=chunk, fp32=fp32)
    # the full layer as the model runs it (in its dtype, or fp32), then every vocabulary entry's log-softmax
    if fp32:
        logits = hidden.double() @ weight.double().T + bias.double()
    else:
        logits = torch.nn.functional.linear(hidden, weight, bias).double()
    full = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, targets[..., None])[..., 0]
    assert got.dtype == torch.float32 and got.shape == targets.shape
    assert torch.allclose(got.double(), full, atol=1e-5)


def test_loggap_replay_runs_no_full_vocabulary_output(tiny_llama):
    """The output layer returns one value per position under loggap (its (B, L, V) logits never exist), and the same
    q as the full output layer's log-softmax (the fp64 loop in test_replay_matches_the_fp64_loop_over_tokens)."""
    shapes = []
    head = tiny_llama.get_output_embeddings()
    hook = head.register_forward_hook(lambda mod, inp, out: shapes.append(tuple(out.shape)))
    try:
        replay_relevance(tiny_llama, requests(), num_rewards=3, relevance="loggap", micro_batch_size=2)
        assert shapes and all(s[-1] == 1 for s in shapes)
        shapes.clear()
        replay_relevance(tiny_llama, requests(), num_rewards=3, relevance="js", micro_batch_size=2)
        assert any(s[-1] == VOCAB for s in shapes)
    finally:
        hook.remove()
    assert "forward" not in vars(head)  # the layer's own forward is back


def test_loggap_formula_at_small_and_large_gaps():
    lp = torch.tensor([-1.0, -2.0, -3.0, -1e-9])
    lm = torch.tensor([-1.0, -1.0, -30.0, 0.0])
    got = RELEVANCE["loggap"].distance(lp, lm)
    want = [1 - math.exp(-abs(a - b)) for a, b in zip(lp.double().tolist(), lm.double().tolist())]
    assert got[0] == 0 and torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-6)
    assert got[3] > 0  # a 1e-9 gap is not lost to exp(-g) rounding to 1


# ── the null context ──


def test_null_context_text_places_the_null_like_the_diagnostics():
    prompt = "<u>Write a poem. Use no commas. End with 'Bye'.</u><a>"
    blocks = ["Use no commas.", "Reference: SELECT 1"]
    full = context_texts(prompt, blocks, "\n", "</u><a>")[0]
    inline = null_context_text(prompt, blocks, NullBlock("Null.", INLINE), "\n", "</u><a>")
    assert inline == full.replace("Use no commas.", "Null. Use no commas.")
    appended = null_context_text(prompt, blocks, NullBlock("Null.", APPENDED), "\n", "</u><a>")
    assert appended == full.replace("</u><a>", "\nNull.</u><a>")
    # no block in the prompt: an inline null goes where appended blocks go
    only_appended = null_context_text(prompt, ["", "Reference: SELECT 1"], NullBlock("Null.", INLINE), "\n", "</u><a>")
    assert only_appended == prompt.replace("</u><a>", "\nReference: SELECT 1\nNull.</u><a>")
    assert NullBlock().text == NULL_TEXT
    with pytest.raises(ValueError, match="position"):
        NullBlock(position="middle")


def test_requests_carry_the_null_context_from_text_and_from_ids():
    class CharTok:  # one id per character; the chat template's suffix is </u><a>
        chat_template = "x"

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [3 + ord(c) % 90 for c in text]}

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return "<u>" + messages[-1]["content"] + "</u><a>"

    tok = CharTok()
    enc = lambda text: tok(text)["input_ids"]  # noqa: E731
    prompt = "<u>Question: list users. Use no commas.</u><a>"
    blocks = ["Use no commas.", "gold: SELECT name"]
    null = NullBlock("Null.", INLINE)
    req = request_from_text(tok, prompt, blocks, [5, 6], [0, 1], "\n", null=null)
    assert req.null_context == enc(null_context_text(prompt, blocks, null, "\n", "</u><a>"))
    assert request_from_text(tok, prompt, blocks, [5, 6], [0, 1], "\n").null_context is None
    truncated = enc(prompt)[5:]
    req, _ = request_for_rollout(tok, prompt, truncated, blocks, [5, 6], [0, 1], "\n", null=null)
    cut = len(truncated) - len(enc("</u><a>"))
    assert req.null_context == truncated[:cut] + enc("\ngold: SELECT name") + enc("\nNull.") + truncated[cut:]
