"""Hand-built OpenRLHF objects for adapter tests (no Ray)."""

from types import SimpleNamespace


def make_args(
    estimator="mrtpo",
    n=4,
    beta=0.5,
    warmup=0,
    placement="mrtpo",
    cap=None,
    use_kl_loss=True,
    weighting="none",
    temperature=0.9,
    reward_weights=(),
    relevance="js",
):
    return SimpleNamespace(
        algo=SimpleNamespace(
            advantage=SimpleNamespace(
                estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=False, is_correction_level="off"
            ),
            kl=SimpleNamespace(use_loss=use_kl_loss, estimator="k1"),
            mrtpo=SimpleNamespace(
                beta=beta,
                warmup_steps=warmup,
                cap=cap,
                placement=placement,
                relevance=relevance,
                reward_weighting=weighting,
                reward_weights=reward_weights,
                eps=1e-4,
                replay_micro_batch_size=3,
                chunk_size=5,
                js_kernel="compiled",
                replay_logits="model",
                block_separator="\n",
            ),
            dynamic_filtering_enable=False,
        ),
        rollout=SimpleNamespace(n_samples_per_prompt=n, temperature=temperature, micro_batch_size=2, max_new_tokens=16),
        reward=SimpleNamespace(clip_range=None, overlong_buffer_len=None, stop_properly_penalty_coef=None),
        train=SimpleNamespace(seed=7, colocate_all=False, colocate_actor_ref=False, dynamic_batch_enable=False),
        data=SimpleNamespace(max_len=128),
        ds=SimpleNamespace(ring_attn_size=1, tensor_parallel_size=1),
    )


def vllm_response(prompt_ids, response_ids, prompt_text, names, values, blocks, label="L"):
    """A response dict shaped like upstream's rollout executor output."""
    tokens = list(prompt_ids) + list(response_ids)
    return {
        "observation_tokens": tokens,
        "action_ranges": [(len(prompt_ids), len(tokens))],
        "reward": float(sum(values)),
        "scores": float(values[-1]),
        "extra_logs": {
            "mrtpo_reward_names": names,
            "mrtpo_reward_values": values,
            "mrtpo_reward_blocks": blocks,
            "mrtpo_reward_reasons": [""] * len(names),
            "sql_ok": 1.0,
        },
        "rollout_log_probs": None,
        "prompt": prompt_text,
        "label": label,
        "truncated": False,
    }


class LocalActorGroup:
    """Stands in for RayActorGroup: runs the real actor method in-process on ``num_ranks`` fake ranks."""

    def __init__(self, actor, num_ranks=2):
        self._actor_handlers = [actor] * num_ranks
        self.duplicate_actors = 1
        self.calls = []

    def async_run_method_batch(self, method_name, **kwargs):
        n = len(next(iter(kwargs.values())))
        assert n == len(self._actor_handlers)
        self.calls.append((method_name, kwargs))
        out = []
        for r in range(n):
            out.append([getattr(self._actor_handlers[r], method_name)(**{k: v[r] for k, v in kwargs.items()})])
        return out

    def async_run_method(self, method_name, **kwargs):
        return [getattr(a, method_name)(**kwargs) for a in self._actor_handlers]


def fake_actor(model, pad_token_id=0):
    from openrlhf.models.actor import Actor

    from mrtpo_openrlhf.adapter.actor import MRTPOPolicyModelActorBase

    actor = MRTPOPolicyModelActorBase.__new__(MRTPOPolicyModelActorBase)
    actor.actor = Actor(model)
    actor.tokenizer = SimpleNamespace(pad_token_id=pad_token_id)
    actor.strategy = SimpleNamespace(is_rank_0=lambda: False)
    actor.forward_counts = []
    return actor
