"""The policy's log-prob forward at the response positions only gives upstream's log-probs and gradients.

The reference is upstream's own ``openrlhf.models.Actor.forward`` (full-position logits, then sliced) on the same
weights: left-padded prompts, right-padded responses, a sampling temperature, both through ``return_output``.
"""

import copy

import pytest
import torch
from openrlhf.models import Actor
from transformers import LlamaConfig, LlamaForCausalLM

from mrtpo_openrlhf.adapter.actor import ResponseLogitsActor

VOCAB, PROMPT, RESPONSE = 97, 9, 5


def actors(temperature=0.7):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config).float()
    upstream = Actor(model, temperature=temperature)
    upstream.packing_samples = False  # set by Actor.__init__ only when it loads a path itself
    ours = copy.deepcopy(upstream)
    ours.__class__ = ResponseLogitsActor  # how the policy actor installs it
    return upstream, ours


def batch():
    """Two rows: a short prompt left-padded and a response right-padded, and a full-length row."""
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(3, VOCAB, (2, PROMPT + RESPONSE), generator=g)
    attn = torch.ones_like(seq)
    attn[0, :3] = 0  # left padding of the prompt
    seq[0, :3] = 0
    attn[0, -2:] = 0  # the response ended early: right padding
    seq[0, -2:] = 0
    action_mask = attn[:, PROMPT:].clone()
    return seq, attn, action_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_and_their_gradients_match_upstream(temperature):
    upstream, ours = actors(temperature)
    seq, attn, action_mask = batch()
    want = upstream(seq, action_mask, attention_mask=attn)
    got = ours(seq, action_mask, attention_mask=attn)
    assert got.shape == want.shape == (2, RESPONSE)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert (got[0, -2:] == 0).all()  # masked positions

    want.sum().backward()
    got.sum().backward()
    for (name, a), (_, b) in zip(upstream.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_return_output_holds_the_kept_positions_logits():
    upstream, ours = actors()
    seq, attn, action_mask = batch()
    want, full = upstream(seq, action_mask, attention_mask=attn, return_output=True)
    got, kept = ours(seq, action_mask, attention_mask=attn, return_output=True)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # as the model gave them (upstream's are divided by the temperature in place)
    assert kept["logits"].shape == (2, RESPONSE + 1, VOCAB) and kept["logits"].dtype == torch.float32
    torch.testing.assert_close(kept["logits"] / 0.7, full["logits"][:, -(RESPONSE + 1) :], atol=1e-6, rtol=1e-5)


def test_calls_it_does_not_cover_go_to_upstream_unchanged():
    upstream, ours = actors()
    seq, attn, action_mask = batch()
    want, want_out = upstream(seq, action_mask, attention_mask=attn, return_output=True, return_entropy=True)
    got, got_out = ours(seq, action_mask, attention_mask=attn, return_output=True, return_entropy=True)
    torch.testing.assert_close(got, want)
    assert got_out["logits"].shape == (2, PROMPT + RESPONSE, VOCAB)  # upstream's full logits
    torch.testing.assert_close(got_out.entropy, want_out.entropy)
    torch.testing.assert_close(
        ours(seq, attention_mask=attn, return_logprobs=True), upstream(seq, attention_mask=attn, return_logprobs=True)
    )


def upstream_experience_batch():
    """Two samples as OpenRLHF 0.11.2 builds them (``_process_response_into_experience`` on a vLLM response, then
    ``Experience.concat_experiences`` as its experience maker batches them): prompt and response concatenated,
    right-padded, and an action mask over the whole sequence after the first token, zero on the prompt. Prompts of
    9 and 6 tokens, responses of 5 and 4."""
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    g = torch.Generator().manual_seed(2)
    samples = []
    for prompt, response in ((9, 5), (6, 4)):
        tokens = torch.randint(3, VOCAB, (prompt + response,), generator=g).tolist()
        raw = dict(observation_tokens=tokens, action_ranges=[(prompt, prompt + response)], rollout_log_probs=None,
                   reward=1.0, scores=1.0, prompt="p", label="l", extra_logs={})  # fmt: skip
        samples.append(SamplesGenerator._process_response_into_experience(None, raw, max_len=64))
    return Experience.concat_experiences(samples, 0)


def test_upstreams_own_action_mask_layout_keeps_only_the_response_positions():
    experience = upstream_experience_batch()
    seq, attn, action_mask = experience.sequences, experience.attention_mask, experience.action_mask
    assert action_mask.shape == (2, 13)  # upstream's layout: T - 1 columns, the prompts' among them
    assert action_mask[0, :8].sum() == 0 and action_mask[1, :5].sum() == 0
    upstream, ours = actors()
    want, _ = upstream(seq, action_mask, attention_mask=attn, return_output=True)
    got, kept = ours(seq, action_mask, attention_mask=attn, return_output=True)
    assert got.shape == want.shape == (2, 13)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # the output layer ran from the first action column (5: the shorter prompt's last token) to the end
    assert kept["logits"].shape == (2, 13 - 5 + 1, VOCAB)
    want.sum().backward()
    got.sum().backward()
    for (name, a), (_, b) in zip(upstream.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_a_batch_without_actions_keeps_one_position_and_gives_zeros():
    upstream, ours = actors()
    seq, attn, action_mask = batch()
    none = torch.zeros_like(action_mask)
    got, kept = ours(seq, none, attention_mask=attn, return_output=True)
    assert kept["logits"].shape[1] == 1 and (got == 0).all() and got.shape == none.shape
