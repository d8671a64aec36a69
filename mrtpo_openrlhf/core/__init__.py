"""MRTPO core: pure torch, no OpenRLHF or Ray import.

Data flow (``estimators``): rewards (N,K) -> ``response_advantages`` (A per reward, GDPO's response level) ->
``replay_relevance`` (q, per reward and token, for the pairs with A != 0; the ``relevance`` measure) ->
``ADVANTAGE_ESTIMATORS[name]``
(placement ``token_advantages``, GDPO's batch step ``rescale_token_advantages``, the length penalty, the clip
range) -> the clipped surrogate (upstream PolicyLoss). The method's defaults are in ``settings``.
"""

from .estimators import (
    ADVANTAGE_ESTIMATORS,
    UNIFORM,
    AdvantageEstimator,
    ResponseAdvantages,
    StepPlacement,
    TokenAdvantages,
    TokenInputs,
    register_estimator,
    response_advantages,
    token_path,
)
from .gdpo import batch_standardize, fixed_reward_weights, group_normalize, saw_weights, weighted_sum
from .null_block import DEFAULT_NULL_BLOCK, NULL_POSITIONS, NULL_TEXT, NullBlock, null_kind, with_null_blocks
from .placements import (
    JOINT_REPLAY,
    NO_REPLAY,
    PER_REWARD,
    PLACEMENTS,
    REPLAYS,
    Placement,
    get_placement,
    placement_arms,
    placement_help,
    placement_modes,
    register_placement,
)
from .relevance import (
    DISTRIBUTIONS,
    OUTPUTS,
    RELEVANCE,
    TOKEN_LOG_PROBS,
    RelevanceMeasure,
    get_relevance,
    js_relevance,
    register_relevance,
    relevance_arms,
    relevance_help,
    relevance_names,
    sampled_token_log_probs,
)
from .replay import (
    JOINT,
    NULL,
    PROMPT_IDS_MISMATCH,
    JointContext,
    NullContext,
    ReplayRequest,
    chat_suffix_text,
    context_ids,
    context_texts,
    count_forwards,
    find_insert_position,
    inline_blocks,
    localization,
    null_context_text,
    prefix_sharing_unsupported,
    replay_relevance,
    request_for_rollout,
    request_from_ids,
    request_from_text,
    shared_prefix_length,
    tokenize_blocks,
    tokens_for_mass,
)
from .settings import (
    DEFAULT_BETA,
    DEFAULT_BLOCK_SEPARATOR,
    DEFAULT_CAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_EPS,
    DEFAULT_JS_KERNEL,
    DEFAULT_PLACEMENT,
    DEFAULT_RELEVANCE,
    DEFAULT_REPLAY_MICRO_BATCH_SIZE,
    DEFAULT_REWARD_WEIGHTING,
    DEFAULT_REWARD_WEIGHTS,
    DEFAULT_WARMUP_STEPS,
    JS_KERNELS,
    REWARD_WEIGHTINGS,
    RUN_SETTINGS,
    MethodSettings,
    RunSettings,
    parse_reward_weights,
)
from .weights import (
    apply_cap,
    beta_schedule,
    clip_response_advantages,
    credit_weights,
    rescale_token_advantages,
    token_advantages,
)

__all__ = [name for name in dir() if not name.startswith("_")]
