"""MRTPO core: pure torch, no OpenRLHF or Ray import.

Data flow: rewards (B,K) -> ``group_normalize`` (A, per reward) -> ``replay_relevance`` (q, per reward
and token) -> ``credit_weights`` / ``token_advantages`` (placement) -> ``rescale_token_advantages``
(GDPO batch step) -> the clipped surrogate (upstream PolicyLoss).
"""
from .gdpo import (
    ADVANTAGE_ESTIMATORS,
    DEFAULT_EPS,
    batch_standardize,
    gdpo_advantages,
    group_normalize,
    grpo_advantages,
    register_estimator,
    saw_weights,
    weighted_sum,
)
from .relevance import DEFAULT_CHUNK_SIZE, js_relevance
from .replay import (
    JOINT,
    PROMPT_IDS_MISMATCH,
    ReplayRequest,
    chat_suffix_text,
    context_ids,
    context_texts,
    count_forwards,
    find_insert_position,
    inline_blocks,
    localization,
    pairs_to_replay,
    prefix_sharing_unsupported,
    replay_relevance,
    request_for_rollout,
    request_from_ids,
    request_from_text,
    shared_prefix_length,
    tokenize_blocks,
    tokens_for_mass,
)
from .weights import (
    PLACEMENT_MODES,
    apply_cap,
    beta_schedule,
    clip_response_advantages,
    credit_weights,
    mrtpo_advantages,
    rescale_token_advantages,
    token_advantages,
)

__all__ = [name for name in dir() if not name.startswith("_")]
