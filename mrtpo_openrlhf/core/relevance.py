"""Per-token relevance q: how much removing reward k's verifier block changes the policy at each response token.

``RELEVANCE`` (below) registers the measures (``--algo.mrtpo.relevance``): ``js`` (the default, this module's JS
distance), ``loggap`` (the sampled token's log-probability gap, no distribution kept) and ``js-contrast`` (JS minus
the null block's JS). Each entry says what the replay must return per context; ``core.replay`` computes only that.

The Jensen-Shannon distance between two next-token distributions:

q[t] = sqrt(JSD(p_t, m_t) / ln 2) in [0, 1], with p from the ``full`` context and m from ``minus_k``.
This equals ``scipy.spatial.distance.jensenshannon(p, m, base=2)``.

One function (``_jsd_nats``) holds the formula. It runs eagerly or, by default, compiled by ``torch.compile``
into one fused kernel per chunk (no (N, V) intermediates in memory; measured 2x faster on CPU): the same code
and the same accuracy either way, and a compile that fails falls back to the eager run with a logged reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from .settings import DEFAULT_CHUNK_SIZE, DEFAULT_JS_KERNEL, JS_KERNELS

_log = logging.getLogger(__name__)

# On CPU a chunk's fp32 buffers should stay in cache: ~2 MiB each (measured 1.8x faster than 256 positions
# at V=32,000 on a 2-core AVX512 machine). Only ever lowers the chunk size, so memory only goes down.
CPU_CHUNK_ELEMENTS = 1 << 19
LN2 = 0.6931471805599453
# Below this gap between log-probabilities expm1 comes from its Taylor series: compilers lower expm1 to exp - 1
# (Inductor's CPU vector code does), which loses every digit of a small difference (measured: the distance of
# rows 1e-4 apart came out 2x too large). Degree 5 at a gap of 0.1: error below 1.5e-8 relative, under fp32's.
_SERIES_BELOW = 0.1


def _log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 log-softmax of logits / temperature in a new buffer (the caller's tensor is never modified).

    A -inf log-probability becomes the lowest finite fp32 value: its probability is still exactly 0, and the
    JSD terms below stay finite (no 0 * inf).
    """
    x = logits if temperature == 1.0 else logits.float() / temperature
    return torch.log_softmax(x, dim=-1, dtype=torch.float32).clamp_min_(torch.finfo(torch.float32).min)


def _expm1_neg(gap: torch.Tensor) -> torch.Tensor:
    """expm1(-gap) for gap >= 0, accurate near 0 eagerly and compiled: any shape -> same shape."""
    x = -gap
    series = x * (1.0 + x * (0.5 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120)))))
    return torch.where(gap < _SERIES_BELOW, series, torch.exp(x) - 1.0)


def _jsd_nats(logits_p: torch.Tensor, logits_q: torch.Tensor, temperature: float) -> torch.Tensor:
    """JSD(softmax(logits_p / τ), softmax(logits_q / τ)) in nats over the last dim: (N, V) x 2 -> (N,) fp32.

    Per entry, let P be the larger of the two probabilities, R the smaller, gap = log P - log R >= 0,
    e = R / P - 1 = expm1(-gap) and m = (P + R) / 2. Then l = log m - log P = log1p(e / 2) and
        2 JSD = sum_v P (log P - log m) + R (log R - log m) = -sum_v P [l + (1 + e)(gap + l)].
    Besides the log-softmaxes, three transcendentals per entry (exp, expm1, log1p; e is in [-1, 0]); expm1 and
    log1p keep small differences accurate, and identical rows give gap = e = l = 0, so exactly 0.
    """
    lp = _log_probs(logits_p, temperature)
    lq = _log_probs(logits_q, temperature)
    gap = torch.sub(lp, lq).abs_()
    larger = torch.maximum(lp, lq).exp_()
    del lp, lq
    e = _expm1_neg(gap)
    l_mp = torch.mul(e, 0.5).log1p_()
    terms = e.add_(1.0).mul_(gap.add_(l_mp)).add_(l_mp)
    return (-0.5 * torch.linalg.vecdot(larger, terms)).clamp_min(0.0)


_compiled: dict[str, Callable] = {}  # device type -> compiled _jsd_nats
_compile_failed: dict[str, str] = {}  # device type -> why its compile failed (then eager from there on)


def _jsd_kernel(kernel: str, device_type: str) -> Callable:
    if kernel == "eager" or device_type in _compile_failed:
        return _jsd_nats
    if device_type not in _compiled:
        # dynamic: one compile for every chunk length and vocabulary size
        _compiled[device_type] = torch.compile(_jsd_nats, dynamic=True)
    return _compiled[device_type]


def _compile_inputs(*chunks: torch.Tensor) -> list[torch.Tensor]:
    """The chunks as the compiled kernel takes them without compiling again: copies (a view makes the compiler
    guard on its base's shape) with the row count unbacked (else a 1-row chunk is specialized). Without this,
    T = 1 and T past one chunk each compiled anew (3 graphs in a run; tests/core/test_relevance.py)."""
    out = [chunk.clone() for chunk in chunks]
    for chunk in out:
        torch._dynamo.decorators.mark_unbacked(chunk, 0)
    return out


def js_relevance(
    logits_full: torch.Tensor,
    logits_minus: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    kernel: str = DEFAULT_JS_KERNEL,
) -> torch.Tensor:
    """Per-position JS distance between softmax(logits_full/τ) and softmax(logits_minus/τ).

    Args:
        logits_full, logits_minus: (..., T, V) in any float dtype (bf16 is fine); computed in fp32.
        mask: optional (..., T) bool/0-1; masked positions give 0.
        temperature: the rollout's sampling temperature τ > 0.
        chunk_size: positions per chunk (at most); extra memory is O(chunk_size * V), not O(T * V).
            On CPU it is capped at ``CPU_CHUNK_ELEMENTS // V`` positions (cache-sized, faster).
        kernel: ``compiled`` (``torch.compile`` of the formula; eager if that fails, logged once) or ``eager``.
    Returns:
        (..., T) float32 in [0, 1]: 0 for identical distributions, 1 for disjoint supports.
    """
    if logits_full.shape != logits_minus.shape:
        raise ValueError(f"shape mismatch: {tuple(logits_full.shape)} vs {tuple(logits_minus.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if kernel not in JS_KERNELS:
        raise ValueError(f"kernel must be one of {JS_KERNELS}, got {kernel!r}")
    lead, vocab = logits_full.shape[:-1], logits_full.shape[-1]
    device_type = logits_full.device.type
    if device_type == "cpu":
        chunk_size = min(chunk_size, max(1, CPU_CHUNK_ELEMENTS // max(vocab, 1)))
    flat_full = logits_full.reshape(-1, vocab)
    flat_minus = logits_minus.reshape(-1, vocab)
    flat_mask = None if mask is None else mask.reshape(-1).bool()
    out = torch.zeros(flat_full.shape[0], dtype=torch.float32, device=logits_full.device)
    temperature = float(temperature)
    with torch.no_grad():
        for start in range(0, flat_full.shape[0], chunk_size):
            stop = min(start + chunk_size, flat_full.shape[0])
            if flat_mask is not None and not bool(flat_mask[start:stop].any()):
                continue
            pair = (flat_full[start:stop], flat_minus[start:stop], temperature)
            try:
                fn = _jsd_kernel(kernel, device_type)
                jsd = fn(*pair) if fn is _jsd_nats else fn(*_compile_inputs(pair[0], pair[1]), temperature)
            except torch.OutOfMemoryError:
                raise  # not the compiler's fault: a smaller chunk_size is the fix
            except Exception as err:  # noqa: BLE001 - any compile failure (no compiler, unsupported op) -> eager
                if kernel == "eager" or device_type in _compile_failed:
                    raise
                _compile_failed[device_type] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                _log.warning(
                    "JS relevance runs eagerly on %s: torch.compile failed (%s)",
                    device_type,
                    _compile_failed[device_type],
                )
                jsd = _jsd_nats(*pair)
            out[start:stop] = (jsd / LN2).clamp(0.0, 1.0).sqrt()
    if flat_mask is not None:
        out = out * flat_mask
    return out.reshape(lead)


# ── the registry of relevance measures (``--algo.mrtpo.relevance``) ──
#
# A measure turns the replay of two contexts into a per-token q in [0, 1]. Each entry declares what every replayed
# context must return, so the replay computes only that:
DISTRIBUTIONS = "distributions"  # (T, V) response logits: the full next-token distributions
TOKEN_LOG_PROBS = "token_log_probs"  # (T,) fp32 log-probability of the sampled token (no (T, V) tensor kept)
OUTPUTS = (DISTRIBUTIONS, TOKEN_LOG_PROBS)

DistanceFn = Callable[..., torch.Tensor]
ContrastFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class RelevanceMeasure:
    """A registered relevance measure.

    name: the ``--algo.mrtpo.relevance`` value.
    output: what each replayed context returns (``DISTRIBUTIONS`` or ``TOKEN_LOG_PROBS``).
    distance: ``(full, other, *, temperature, chunk_size, kernel) -> (T,)`` fp32 in [0, 1], between the ``full``
        context's output and another context's (minus_k, the joint context, or the null block's); ``full``/``other``
        are (T, V) logits or (T,) sampled-token log-probs, as ``output`` says.
    null_context: the replay adds one more context per response, ``full`` with the task's null block
        (``core.null_block``), shared by all of the response's rewards.
    contrast: with ``null_context``, ``(d_reward (T,), d_null (T,)) -> q (T,)``; None: q = the reward's distance.
    help: the CLI's help text.
    arm: its study arm (the default placement over this measure), None for none.
    """

    name: str
    output: str
    distance: DistanceFn
    help: str
    arm: str | None = None
    null_context: bool = False
    contrast: ContrastFn | None = None

    def q(self, full: torch.Tensor, minus: torch.Tensor, null: torch.Tensor | None = None, **options) -> torch.Tensor:
        """q of one (response, reward) pair from its contexts' outputs (the replay computes the same in steps,
        sharing the null's distance between rewards): (T, ...) x 2 (+ the null's) -> (T,) fp32."""
        d = self.distance(full, minus, **options)
        if not self.null_context:
            return d
        if null is None:
            raise ValueError(f"relevance {self.name!r} needs the null context's output")
        return self.contrast(d, self.distance(full, null, **options))


RELEVANCE: dict[str, RelevanceMeasure] = {}


def register_relevance(
    name: str,
    output: str,
    help: str,
    arm: str | None = None,
    null_context: bool = False,
    contrast: ContrastFn | None = None,
):
    """Register ``distance`` as the relevance measure ``name``; a taken name or study arm is refused."""
    if output not in OUTPUTS:
        raise ValueError(f"relevance {name!r}: output {output!r}, choose from {OUTPUTS}")
    if name in RELEVANCE:
        raise ValueError(f"relevance measure {name!r} is already registered")
    if arm is not None and arm in {m.arm for m in RELEVANCE.values()}:
        raise ValueError(f"relevance {name!r}: study arm {arm!r} is already taken")
    if null_context != (contrast is not None):
        raise ValueError(f"relevance {name!r}: a null context and a contrast go together")

    def deco(distance: DistanceFn) -> DistanceFn:
        RELEVANCE[name] = RelevanceMeasure(name, output, distance, help, arm, null_context, contrast)
        return distance

    return deco


def get_relevance(name: str) -> RelevanceMeasure:
    if name not in RELEVANCE:
        raise ValueError(f"unknown relevance measure {name!r}; choose from {tuple(RELEVANCE)}")
    return RELEVANCE[name]


def relevance_names() -> tuple[str, ...]:
    """The registered measures, in registration order (the CLI's choices)."""
    return tuple(RELEVANCE)


def relevance_help() -> dict[str, str]:
    return {name: m.help for name, m in RELEVANCE.items()}


def relevance_arms() -> dict[str, str]:
    """{study arm: measure} for the measures that have an arm, in registration order."""
    return {m.arm: name for name, m in RELEVANCE.items() if m.arm is not None}


def js_distance(
    full: torch.Tensor,
    other: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    kernel: str = DEFAULT_JS_KERNEL,
) -> torch.Tensor:
    """The JS distance of each position (``js_relevance``): (T, V) logits x 2 -> (T,) fp32 in [0, 1]."""
    return js_relevance(full, other, temperature=temperature, chunk_size=chunk_size, kernel=kernel)


def log_gap_distance(full: torch.Tensor, other: torch.Tensor, **_options) -> torch.Tensor:
    """1 - exp(-|log p_full(y_t) - log p_other(y_t)|) per response token t: (T,) x 2 log-probs -> (T,) fp32 in [0, 1).

    ``full``/``other``: the log-probability (at the rollout's temperature) of the token the policy sampled at each
    position (``sampled_token_log_probs``). The normalization 1 - exp(-gap) = |p - m| / max(p, m) (p, m the two
    probabilities of the sampled token) is the share of the larger probability the block accounts for: 0 when the
    block does not move the token, towards 1 when one context all but rules the token out. It is per token (a pair's
    q does not depend on its other tokens, as JS's does not; dividing by the response's maximum would let one noisy
    token set every other token's scale), monotone in the gap and bounded like JS, and at small gaps equals the gap
    (1 - exp(-g) = g - g^2/2 + ...). expm1 keeps small gaps exact.
    """
    if full.shape != other.shape:
        raise ValueError(f"shape mismatch: {tuple(full.shape)} vs {tuple(other.shape)}")
    gap = (full.float() - other.float()).abs()
    return (-torch.expm1(-gap)).clamp(0.0, 1.0)


def floor_contrast(d_reward: torch.Tensor, d_null: torch.Tensor) -> torch.Tensor:
    """max(0, d_reward - d_null) per token: (T,) x 2 -> (T,) fp32 in [0, 1].

    What the reward's block moves beyond what any change of the prompt moves (the null block: a neutral sentence
    at the same place). A response where nothing is left (q = 0 on every token) gets uniform credit weights
    (``weights.credit_weights``: a row without signal keeps GDPO's uniform placement).
    """
    return (d_reward.float() - d_null.float()).clamp_min(0.0)


register_relevance(
    "js",
    DISTRIBUTIONS,
    "the Jensen-Shannon distance between the next-token distributions with and without the reward's block",
)(js_distance)
register_relevance(
    "loggap",
    TOKEN_LOG_PROBS,
    "1 - exp(-|log p_full(y_t) - log p_minus(y_t)|) of the sampled token y_t (CoRT's signal, per reward); "
    "its replay keeps no full-vocabulary logits",
    arm="mrtpo-loggap",
)(log_gap_distance)
register_relevance(
    "js-contrast",
    DISTRIBUTIONS,
    "the reward's JS distance minus the null block's at the same token, floored at 0 (uniform where nothing is "
    "left); one more context per replayed response",
    arm="mrtpo-contrast",
    null_context=True,
    contrast=floor_contrast,
)(js_distance)


def sampled_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    fp32: bool = False,
) -> torch.Tensor:
    """log softmax(h W^T + b)[y] / τ of each position's sampled token, the output layer run a chunk at a time.

    Args:
        hidden: (..., d) last hidden states. weight: (V, d), bias: (V,) or None (the output layer's).
        targets: (...) int token ids y.
        fp32: the layer in fp32 (``replay.fp32_logits``'s rule); else in the weight's dtype, as the model's own head.
    Returns:
        (...) fp32: z_y / τ - logsumexp(z / τ), z = h W^T + b. The normalizer needs every row of the layer (a
        log-probability is not defined by the sampled row alone), but only a (chunk, V) block of logits lives at a
        time: no (T, V) tensor is kept, and no distribution is compared.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    lead, d = hidden.shape[:-1], hidden.shape[-1]
    if targets.shape != lead:
        raise ValueError(f"targets {tuple(targets.shape)} do not match the hidden states' {tuple(lead)}")
    flat, ids = hidden.reshape(-1, d), targets.reshape(-1).long()
    w = weight.float() if fp32 else weight
    b = None if bias is None else (bias.float() if fp32 else bias)
    if not fp32:
        flat = flat.to(weight.dtype)
    else:
        flat = flat.float()
    vocab = weight.shape[0]
    if flat.device.type == "cpu":
        chunk_size = min(chunk_size, max(1, CPU_CHUNK_ELEMENTS // max(vocab, 1)))
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, flat.shape[0], chunk_size):
        stop = min(start + chunk_size, flat.shape[0])
        lp = _log_probs(torch.nn.functional.linear(flat[start:stop], w, b), float(temperature))
        out[start:stop] = lp.gather(-1, ids[start:stop, None]).squeeze(-1)
    return out.reshape(lead)
