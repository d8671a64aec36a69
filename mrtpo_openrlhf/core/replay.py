"""Replay: teacher-force each sampled response after the ``full`` and ``minus_k`` contexts.

For response i, ``full`` = prompt with every verifier block, ``minus_k`` = the same without block k
(the joint ablation: without any block). The response token ids are reused as sampled, never
re-tokenized. Only response positions get logits (``logits_to_keep``), and the JS distance is taken
in position chunks, so memory stays at a few contexts' response logits.

The contexts of one response share everything before the first token where they differ (for appended
blocks the whole prompt): that prefix runs once and its key/value cache is copied into each branch
(``replay_relevance``, ``share_prefix``). Branches are streamed in micro-batches in the order full_i,
minus_{i,k1}, minus_{i,k2}, ..., so the ``full`` logits of one response are kept only until its last
pair is done.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

import torch

from .null_block import INLINE, NullBlock, _spans_in_head, null_kind, with_null_blocks
from .relevance import DISTRIBUTIONS, TOKEN_LOG_PROBS, get_relevance, sampled_token_log_probs
from .settings import DEFAULT_BLOCK_SEPARATOR, DEFAULT_CHUNK_SIZE, DEFAULT_JS_KERNEL, DEFAULT_RELEVANCE

_log = logging.getLogger(__name__)


class JointContext(enum.Enum):
    """The joint ablation (placement ``joint``): one context with every verifier block removed, replayed once per
    response; its relevance profile is shared by every reward in the request's ``joint_rewards``."""

    ALL_BLOCKS_REMOVED = "all blocks removed"


JOINT = JointContext.ALL_BLOCKS_REMOVED  # its key in ``ReplayRequest.minus_contexts``


class NullContext(enum.Enum):
    """``full`` with the task's null block added (``core.null_block``): the extra context of a measure that
    contrasts with it (``js-contrast``), one per response, shared by its rewards."""

    NULL_BLOCK_ADDED = "null block added"


NULL = NullContext.NULL_BLOCK_ADDED  # its key in the replay's jobs
ContextKey = int | JointContext | NullContext  # a reward index k (the context minus_k), JOINT, or NULL


@dataclass
class ReplayRequest:
    """One response to replay: its ``full`` context and the ``minus`` contexts of the pairs to replay.

    full_context: token ids of the prompt with every verifier block.
    response_ids: the sampled response token ids (reused as sampled, never re-tokenized).
    minus_contexts: reward index k -> token ids of ``full`` without block k; only the pairs to replay.
        Key ``JOINT``: one context without any block (the joint ablation); its profile is written to
        every index in ``joint_rewards``.
    null_context: ``full`` with the null block added (a measure with ``null_context`` needs it); None: none.
    """

    full_context: Sequence[int]
    response_ids: Sequence[int]
    minus_contexts: dict[ContextKey, Sequence[int]] = field(default_factory=dict)
    joint_rewards: Sequence[int] = ()
    null_context: Sequence[int] | None = None

    @property
    def rewards(self) -> list[int]:
        """The reward indices this request fills in."""
        keys = [k for k in self.minus_contexts if k != JOINT]
        return sorted(set(keys) | (set(self.joint_rewards) if JOINT in self.minus_contexts else set()))


def context_ids(prompt_ids: Sequence[int], blocks: Sequence[Sequence[int]], insert_at: int | None) -> list[int]:
    """prompt[:insert_at] + blocks (in order) + prompt[insert_at:]."""
    cut = len(prompt_ids) if insert_at is None else insert_at
    if not 0 <= cut <= len(prompt_ids):
        raise ValueError(f"insert_at={insert_at} outside a prompt of {len(prompt_ids)} tokens")
    out = list(prompt_ids[:cut])
    for block in blocks:
        out.extend(block)
    out.extend(prompt_ids[cut:])
    return out


def request_from_ids(
    prompt_ids: Sequence[int],
    block_ids: Sequence[Sequence[int]],
    response_ids: Sequence[int],
    rewards: Sequence[int],
    insert_at: int | None = None,
    joint: bool = False,
    null_ids: Sequence[int] | None = None,
) -> ReplayRequest:
    """Pre-tokenized blocks, none of them in the prompt: ``full`` inserts all blocks at ``insert_at``,
    ``minus_k`` all but block k. A reward with an empty block is left out (its q is 0). ``null_ids``: the null
    block's ids, added after the blocks in the null context (an appended null)."""
    full = context_ids(prompt_ids, block_ids, insert_at)
    null = None if null_ids is None else context_ids(prompt_ids, [*block_ids, null_ids], insert_at)
    if joint:
        live = [k for k in rewards if block_ids[k]]
        minus = {JOINT: list(prompt_ids)} if live else {}
        return ReplayRequest(full, list(response_ids), minus, live, null)
    minus = {
        k: context_ids(prompt_ids, [b for j, b in enumerate(block_ids) if j != k], insert_at)
        for k in rewards
        if block_ids[k]
    }
    return ReplayRequest(full, list(response_ids), minus, null_context=null)


Span = tuple[int, int]


def inline_blocks(prompt_head: str, blocks: Sequence[str], spans: Sequence[Span | None] | None = None) -> list[bool]:
    """Which blocks sit in the prompt: those with a recorded span (char offsets into the prompt where the task put
    the block), checked to hold the block's text. Without spans (a reward function that records none) a block
    counts as in the prompt when its text occurs there.
    """
    if spans is None:
        return [bool(b) and b in prompt_head for b in blocks]
    if len(spans) != len(blocks):
        raise ValueError(f"{len(spans)} block spans for {len(blocks)} blocks")
    out = []
    for k, (block, span) in enumerate(zip(blocks, spans)):
        if span is None or not block:
            out.append(False)
            continue
        start, end = int(span[0]), int(span[1])
        if not 0 <= start <= end <= len(prompt_head) or prompt_head[start:end] != block:
            raise ValueError(
                f"block {k}'s recorded span {tuple(span)} does not hold its text {block[:60]!r} in the prompt"
            )
        out.append(True)
    return out


def context_texts(
    prompt: str,
    blocks: Sequence[str],
    separator: str = DEFAULT_BLOCK_SEPARATOR,
    suffix: str = "",
    spans: Sequence[Span | None] | None = None,
) -> tuple[str, list[str], str]:
    """Text contexts: (full, [minus_k for each k], none).

    A block in the prompt (``inline_blocks``: at its recorded span, e.g. an instruction's constraint, the format
    description) stays where it is in ``full`` and is cut out of ``minus_k`` at that place only. A block not in
    the prompt (e.g. the SQLite error, the reference query) is added, after ``separator``, at the end of the last
    user message: before ``suffix`` (the chat template's end-of-turn + assistant header) when the prompt ends with
    it, even where its text happens to occur elsewhere in the prompt. An empty block gives minus_k == full.
    ``none`` drops every block (the joint ablation).
    """
    head, tail = _prompt_head(prompt, suffix), prompt[len(_prompt_head(prompt, suffix)) :]
    inline = inline_blocks(head, blocks, spans)
    places = [
        (int(spans[k][0]), int(spans[k][1])) if spans is not None and inline[k] else None for k in range(len(blocks))
    ]

    def render(drop: set[int]) -> str:
        body = head
        cut = sorted(((places[k], k) for k in drop if inline[k] and places[k] is not None), reverse=True)
        for (start, end), _ in cut:
            body = body[:start] + body[end:]
        for k in drop:
            if inline[k] and places[k] is None:
                body = body.replace(blocks[k], "", 1)
        extra = "".join(separator + b for j, b in enumerate(blocks) if b and not inline[j] and j not in drop)
        return body + extra + tail

    return render(set()), [render({k}) for k in range(len(blocks))], render(set(range(len(blocks))))


def null_context_text(
    prompt: str,
    blocks: Sequence[str],
    null: NullBlock,
    separator: str = DEFAULT_BLOCK_SEPARATOR,
    suffix: str = "",
    spans: Sequence[Span | None] | None = None,
) -> str:
    """``full`` (``context_texts``) with the null block added at its place for this response (``null_kind``):
    inline, ``text + " "`` just before the first block in the prompt; appended, one more block after the others."""
    if null_kind(null, prompt, suffix, blocks, spans) == INLINE:
        prompt, blocks, spans, _ = with_null_blocks(prompt, suffix, blocks, spans, null.text, (INLINE,))
        return context_texts(prompt, blocks, separator, suffix, spans)[0]
    head = _prompt_head(prompt, suffix)
    return context_texts(prompt, [*blocks, null.text], separator, suffix, [*_spans_in_head(head, blocks, spans), None])[
        0
    ]


def request_from_text(
    tokenizer: Any,
    prompt: str,
    blocks: Sequence[str],
    response_ids: Sequence[int],
    rewards: Sequence[int],
    separator: str = DEFAULT_BLOCK_SEPARATOR,
    joint: bool = False,
    spans: Sequence[Span | None] | None = None,
    null: NullBlock | None = None,
) -> ReplayRequest:
    """Text prompt and blocks plus a tokenizer (see ``context_texts``); the response ids stay as sampled.

    Contexts are tokenized without adding special tokens: the prompt text already carries the chat
    template's own. ``null``: also the null context (``null_context_text``), for a measure that needs one.
    """
    suffix = chat_suffix_text(tokenizer)
    full, minus, none = context_texts(prompt, blocks, separator, suffix, spans)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    live = [k for k in rewards if minus[k] != full]
    null_ids = None
    if null is not None and null.text and live:
        null_ids = encode(null_context_text(prompt, blocks, null, separator, suffix, spans))
    if joint:
        return ReplayRequest(encode(full), list(response_ids), {JOINT: encode(none)} if live else {}, live, null_ids)
    return ReplayRequest(encode(full), list(response_ids), {k: encode(minus[k]) for k in live}, null_context=null_ids)


PROMPT_IDS_MISMATCH = "prompt_ids_mismatch"


def request_for_rollout(
    tokenizer: Any,
    prompt: str,
    prompt_ids: Sequence[int],
    blocks: Sequence[str],
    response_ids: Sequence[int],
    rewards: Sequence[int],
    separator: str = DEFAULT_BLOCK_SEPARATOR,
    joint: bool = False,
    spans: Sequence[Span | None] | None = None,
    null: NullBlock | None = None,
) -> tuple[ReplayRequest, dict[int, str]]:
    """The replay request of one rollout response, built so that ``full`` starts from what the policy saw.

    When the prompt text tokenizes to the rollout's ``prompt_ids`` (upstream tokenizes it the same way, without
    special tokens), the text contexts are used (``request_from_text``). Otherwise (the rollout truncated a long
    prompt, or the engine added tokens) the contexts are built from ``prompt_ids``: blocks the prompt does not hold
    are inserted as ids at the end of the last user message (``request_from_ids``); a block the prompt holds
    cannot be cut out of ids that no longer match its text, so that pair is skipped (in the joint ablation, the
    whole response). ``null``: the null context too (``request_from_text``; built from ids, the null is appended).

    Returns:
        (request, skipped): skipped maps each requested reward that was left out to its reason.
    """
    if _encode(tokenizer, prompt) == list(prompt_ids):
        return request_from_text(tokenizer, prompt, blocks, response_ids, rewards, separator, joint, spans, null), {}
    inline = inline_blocks(_prompt_head(prompt, chat_suffix_text(tokenizer)), blocks, spans)
    skipped = {k: PROMPT_IDS_MISMATCH for k in rewards if blocks[k] and inline[k]}
    if joint and skipped:
        skipped = {k: PROMPT_IDS_MISMATCH for k in rewards if blocks[k]}
    kept = [k for k in rewards if k not in skipped]
    block_ids = tokenize_blocks(tokenizer, [b if not inline[j] else "" for j, b in enumerate(blocks)], separator)
    insert_at = find_insert_position(prompt_ids, tokenizer)
    null_ids = tokenize_blocks(tokenizer, [null.text], separator)[0] if null is not None and null.text else None
    return request_from_ids(prompt_ids, block_ids, response_ids, kept, insert_at, joint, null_ids), skipped


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _prompt_head(prompt: str, suffix: str) -> str:
    """The prompt without the chat template's trailing suffix (where appended blocks go)."""
    return prompt[: len(prompt) - len(suffix)] if suffix and prompt.endswith(suffix) else prompt


def tokenize_blocks(tokenizer: Any, blocks: Sequence[str], separator: str = DEFAULT_BLOCK_SEPARATOR) -> list[list[int]]:
    """Text blocks -> token ids, each prefixed by ``separator``; an empty block stays empty."""
    return [tokenizer(separator + b, add_special_tokens=False)["input_ids"] if b else [] for b in blocks]


_SUFFIX_CACHE: dict[int, str] = {}


def chat_suffix_text(tokenizer: Any) -> str:
    """What the chat template puts after the last user message (end-of-turn + assistant header)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return ""
    key = id(tokenizer)
    if key not in _SUFFIX_CACHE:
        sentinel = "\u2063MRTPO_SENTINEL\u2063"
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": sentinel}], tokenize=False, add_generation_prompt=True
        )
        _SUFFIX_CACHE[key] = text.split(sentinel, 1)[1] if sentinel in text else ""
    return _SUFFIX_CACHE[key]


def find_insert_position(
    prompt_ids: Sequence[int], tokenizer: Any | None = None, suffix_ids: Sequence[int] | None = None
) -> int:
    """Token position at the end of the last user message: before the chat suffix when the prompt
    ends with it, else the end of the prompt."""
    if suffix_ids is None:
        text = chat_suffix_text(tokenizer)
        suffix_ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    n = len(suffix_ids)
    if n and len(prompt_ids) >= n and list(prompt_ids[-n:]) == list(suffix_ids):
        return len(prompt_ids) - n
    return len(prompt_ids)


@dataclass
class _Job:
    request: int
    reward: ContextKey | None  # None = full
    ids: list[int]
    n_response: int


def _contexts(req: ReplayRequest) -> list[tuple[ContextKey | None, list[int]]]:
    """[(None, full), (k, minus_k), ..., (NULL, null)] for the minus contexts that differ from full (and the null
    context, when the request has one); [] when nothing to replay.

    A context equal to full has q exactly 0: no forward needed.
    """
    full = list(req.full_context)
    minus = [(k, list(ctx)) for k, ctx in req.minus_contexts.items() if list(ctx) != full]
    if not req.response_ids or not minus:
        return []
    null = [] if req.null_context is None else [(NULL, list(req.null_context))]
    return [(None, full), *minus, *null]


def _jobs(requests: Sequence[ReplayRequest]) -> Iterator[_Job]:
    for i, req in enumerate(requests):
        n = len(req.response_ids)
        resp = list(req.response_ids[:-1])  # the last token is predicted, never input
        for k, ctx in _contexts(req):
            yield _Job(i, k, ctx + resp, n)


def shared_prefix_length(contexts: Sequence[Sequence[int]]) -> int:
    """Leading tokens every context shares, leaving at least the last token of each (it predicts response
    token 0, so it must be recomputed in every branch)."""
    if not contexts:
        return 0
    limit = min(len(c) for c in contexts) - 1
    first = contexts[0]
    n = 0
    while n < limit and all(c[n] == first[n] for c in contexts[1:]):
        n += 1
    return max(n, 0)


@dataclass
class _Shared:
    """Responses whose contexts all start with ``prefix`` (one response, or several sampled from one prompt),
    with one branch (a ``_Job`` over the tokens after the prefix) per context, listed response by response."""

    prefix: list[int]
    branches: list[_Job]


def common_prefix_length(a: Sequence, b: Sequence) -> int:
    """How many leading items (token ids, characters) ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# Responses join one prefix forward when the prefix they share covers this much of each one's own shared
# prefix (the responses of one prompt share the whole prompt; their own blocks after it are recomputed per branch).
_JOIN_SHARE = 0.75


def _shared(requests: Sequence[ReplayRequest]) -> list[_Shared]:
    """Each response's contexts cut at the prefix they share; responses sharing most of it (same prompt) merged."""
    items = []
    for i, req in enumerate(requests):
        contexts = _contexts(req)
        if contexts:
            p = shared_prefix_length([ctx for _, ctx in contexts])
            items.append((contexts[0][1][:p], i, contexts))
    items.sort(key=lambda item: (item[0], item[1]))  # lexicographic: responses to one prompt end up adjacent
    clusters: list[tuple[list[int], list[tuple[int, list]]]] = []
    for prefix, i, contexts in items:
        if clusters:
            shared, members = clusters[-1]
            n = common_prefix_length(shared, prefix)
            if n > 0 and n >= _JOIN_SHARE * max(len(shared), len(prefix)):
                clusters[-1] = (shared[:n], members + [(i, contexts)])
                continue
        clusters.append((prefix, [(i, contexts)]))
    out = []
    for prefix, members in clusters:
        p = len(prefix)
        branches = []
        for i, contexts in members:
            resp = list(requests[i].response_ids)
            branches += [_Job(i, k, ctx[p:] + resp[:-1], len(resp)) for k, ctx in contexts]
        out.append(_Shared(prefix, branches))
    return out


_LENGTH_BUCKET = 32  # prefix lengths this close count as equal, so the branch length decides the order


_Plan = list[tuple[list[_Shared], list[list[tuple[int, _Job]]]]]


def _plan(requests: Sequence[ReplayRequest], micro_batch_size: int) -> _Plan:
    """Forward groups: up to ``micro_batch_size`` prefixes of similar length (one prefix forward), then their
    branches as micro-batches of up to ``micro_batch_size`` rows (position in group, branch).

    Branches are taken ``micro_batch_size`` responses at a time (so at most that many responses' full logits
    wait for their minus branches), longest first within them, so rows of equal length share a forward.
    """
    clusters = sorted(
        _shared(requests),
        key=lambda c: (len(c.prefix) // _LENGTH_BUCKET, max(len(b.ids) for b in c.branches), c.branches[0].request),
    )
    plan = []
    for s in range(0, len(clusters), micro_batch_size):
        group = clusters[s : s + micro_batch_size]
        responses: dict[int, list[tuple[int, _Job]]] = {}
        for j, c in enumerate(group):
            for b in c.branches:
                responses.setdefault(b.request, []).append((j, b))
        ordered = sorted(responses.values(), key=lambda rows: -max(len(b.ids) for _, b in rows))
        batches = []
        for w in range(0, len(ordered), micro_batch_size):
            rows = sorted(
                (row for rows in ordered[w : w + micro_batch_size] for row in rows),
                key=lambda row: (-len(row[1].ids), row[1].reward is not None),
            )
            batches += [rows[t : t + micro_batch_size] for t in range(0, len(rows), micro_batch_size)]
        plan.append((group, batches))
    return plan


def count_forwards(requests: Sequence[ReplayRequest], micro_batch_size: int, share_prefix: bool = True) -> int:
    """Number of model forwards ``replay_relevance`` runs (for agreeing on a fixed count across ranks).

    The prefix-shared count (one prefix forward per group plus its branch forwards) is never below the
    unshared one, so it is a safe ``min_forwards`` for a rank that falls back to the unshared replay.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    if not share_prefix:
        n_jobs = sum(1 for _ in _jobs(requests))
        return -(-n_jobs // micro_batch_size)
    return sum(int(any(r.prefix for r in group)) + len(batches) for group, batches in _plan(requests, micro_batch_size))


def _left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            attn[r, width - len(s) :] = 1
    # Positions count real tokens only, so a left-padded row sees the same positions as unpadded.
    pos = (attn.cumsum(dim=1) - 1).clamp_min(0)
    return ids.to(device), attn.to(device), pos.to(device)


def _logits(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0]


def _mask_if_padded(attn: torch.Tensor, padded: bool) -> torch.Tensor | None:
    """No mask when no row is padded: attention then takes its plain causal path (no mask work)."""
    return attn if padded else None


def _response_logits(model: Any, seqs: list[list[int]], keep: int, pad_id: int, device) -> torch.Tensor:
    ids, attn, pos = _left_pad(seqs, pad_id, device)
    mask = _mask_if_padded(attn, len({len(s) for s in seqs}) > 1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, use_cache=False)
    return _logits(out)[:, -keep:]


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


# Attention implementations that take a 2-D mask over cache + new tokens (padding anywhere) with explicit
# position ids. Flash-attention's varlen path aligns its causal mask bottom-right, which is what branches need.
CACHE_ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3")


def prefix_sharing_unsupported(model: Any) -> str | None:
    """Why ``model`` cannot take the prefix-shared replay, or None when it can."""
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the HF model
    cfg = getattr(module, "config", None)
    if cfg is None:
        return "the model has no transformers config"
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder model"
    text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    attn = getattr(text, "_attn_implementation", None) or getattr(cfg, "_attn_implementation", None)
    if attn not in CACHE_ATTENTION:
        return f"attention implementation {attn!r} is not one of {CACHE_ATTENTION}"
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        return f"layer types {sorted(kinds)}: only full-attention layers keep a plain key/value cache"
    if getattr(text, "use_sliding_window", False) and getattr(text, "sliding_window", None):
        return "sliding-window attention"
    return None


def _expanded_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor):
    """A fresh DynamicCache holding rows ``rows`` of the prefix keys/values (copied, never recomputed)."""
    from transformers import DynamicCache

    return DynamicCache([(k.index_select(0, rows), v.index_select(0, rows)) for k, v in layers])


def _prefix_cache(model: Any, group: list[_Shared], pad_id: int, device):
    """One forward over the group's prefixes -> (per-layer (keys, values), (G, P) left-padded prefix mask)."""
    ids, attn, pos = _left_pad([r.prefix for r in group], pad_id, device)
    mask = _mask_if_padded(attn, len({len(r.prefix) for r in group}) > 1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1, use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "layers"):
        raise RuntimeError(
            f"the prefix forward returned no key/value cache ({type(cache).__name__}): "
            "call replay_relevance with share_prefix=False for this model"
        )
    return [(layer.keys, layer.values) for layer in cache.layers], attn


def _branch_logits(
    model: Any, group: list[_Shared], rows: list[tuple[int, _Job]], prefix, keep: int, pad_id: int, device
) -> torch.Tensor:
    """Response logits of branch rows continuing their response's prefix (cache ``prefix``, or None)."""
    ids, attn, pos = _left_pad([job.ids for _, job in rows], pad_id, device)
    offsets = torch.tensor([len(group[j].prefix) for j, _ in rows], device=device)
    pos = pos + offsets[:, None]
    kwargs: dict[str, Any] = {}
    padded = len({len(job.ids) for _, job in rows}) > 1
    if prefix is not None:
        layers, prefix_attn = prefix
        sel = torch.tensor([j for j, _ in rows], device=device)
        attn = torch.cat([prefix_attn.index_select(0, sel), attn], dim=1)
        kwargs["past_key_values"] = _expanded_cache(layers, sel)
        width = max(len(r.prefix) for r in group)  # the cache's width: shorter prefixes are left-padded in it
        padded = padded or any(len(group[j].prefix) != width for j, _ in rows)
    out = model(
        input_ids=ids,
        attention_mask=_mask_if_padded(attn, padded),
        position_ids=pos,
        logits_to_keep=keep,
        use_cache=prefix is not None,
        **kwargs,
    )
    return _logits(out)[:, -keep:]


class _Profiles:
    """Turns each context's output into q with the measure, keeping a response's full output only until its last
    pair is done (a minus branch that comes before its full one waits for it). A measure that contrasts with the
    null context keeps each reward's distance until the response's null distance is in."""

    def __init__(self, requests: Sequence[ReplayRequest], jobs: Sequence[_Job], q: torch.Tensor, measure, options):
        self.requests, self.q, self.measure, self.options = requests, q, measure, options
        self.remaining: dict[int, int] = {}
        for job in jobs:
            if job.reward is not None:
                self.remaining[job.request] = self.remaining.get(job.request, 0) + 1
        self.full: dict[int, torch.Tensor] = {}
        self.waiting: dict[int, list[tuple[_Job, torch.Tensor]]] = {}
        self.distances: dict[int, dict[ContextKey, torch.Tensor]] = {}

    def add(self, job: _Job, out: torch.Tensor) -> None:
        """out: ``job``'s response positions, (n_response, V) logits or (n_response,) sampled-token log-probs."""
        if job.reward is None:
            self.full[job.request] = out
            for pending in self.waiting.pop(job.request, []):
                self.add(*pending)
            return
        if job.request not in self.full:
            self.waiting.setdefault(job.request, []).append((job, out))
            return
        dist = self.measure.distance(self.full[job.request], out, **self.options)
        if self.measure.null_context:
            self.distances.setdefault(job.request, {})[job.reward] = dist
        elif job.reward != NULL:
            self._write(job.request, job.reward, dist)
        self.remaining[job.request] -= 1
        if self.remaining[job.request] == 0:
            del self.full[job.request]
            if self.measure.null_context:
                done = self.distances.pop(job.request)
                null = done.pop(NULL, None)
                if null is None:
                    raise ValueError(f"relevance {self.measure.name!r} needs a null context in every request")
                for key, d in done.items():
                    self._write(job.request, key, self.measure.contrast(d, null))

    def _write(self, request: int, key: ContextKey, dist: torch.Tensor) -> None:
        targets = self.requests[request].joint_rewards if key == JOINT else [key]
        for k in targets:
            self.q[request, k, : dist.shape[0]] = dist.float().cpu()


@contextlib.contextmanager
def fp32_logits(model: Any) -> Iterator[None]:
    """While active, the model's output layer computes its logits in fp32 (from the last hidden state as the model
    made it): bf16 logits are rounded to 8 bits, 0.125 apart at 16-32, which alone puts a floor under q
    (``benchmarks/q_precision.py``; docs/cpu.md). The layer keeps its module call, so ZeRO-3 still gathers its
    weight. Costs a transient fp32 copy of that weight per forward and logits twice the size."""
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the HF model
    head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(f"fp32 logits need a Linear output layer, got {type(head).__name__}")

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        bias = None if head.bias is None else head.bias.float()
        return torch.nn.functional.linear(hidden.float(), head.weight.float(), bias)

    head.forward = forward
    try:
        yield
    finally:
        del head.forward  # back to the class's forward


class _TokenLogProbHead:
    """While active (``with``), the model's output layer returns (B, L, 1) fp32 log-probabilities of ``targets``
    ((B, L) token ids set before each forward; None: token 0, for forwards whose output is dropped) instead of
    (B, L, V) logits (``relevance.sampled_token_log_probs``). The layer keeps its module call (ZeRO-3 still gathers
    its weight)."""

    def __init__(self, model: Any, temperature: float, chunk_size: int, fp32: bool):
        module = getattr(model, "module", model)
        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        if not isinstance(head, torch.nn.Linear):
            raise ValueError(f"sampled-token log-probs need a Linear output layer, got {type(head).__name__}")
        self.head, self.temperature, self.chunk_size, self.fp32 = head, temperature, chunk_size, fp32
        self.targets: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        targets = self.targets
        if targets is None:
            targets = torch.zeros(hidden.shape[:-1], dtype=torch.long, device=hidden.device)
        if tuple(targets.shape) != tuple(hidden.shape[:-1]):
            raise RuntimeError(f"targets {tuple(targets.shape)} for hidden states {tuple(hidden.shape)}")
        lp = sampled_token_log_probs(
            hidden,
            self.head.weight,
            self.head.bias,
            targets.to(hidden.device),
            self.temperature,
            self.chunk_size,
            self.fp32,
        )
        return lp.unsqueeze(-1)

    def __enter__(self) -> _TokenLogProbHead:
        self.head.forward = self.forward
        return self

    def __exit__(self, *exc) -> None:
        del self.head.forward  # back to the class's forward


def _targets(requests: Sequence[ReplayRequest], jobs: Sequence[_Job], keep: int) -> torch.Tensor:
    """(B, keep) sampled token of each kept position: a row's last n_response positions predict its response."""
    out = torch.zeros((len(jobs), keep), dtype=torch.long)
    for r, job in enumerate(jobs):
        out[r, keep - job.n_response :] = torch.tensor(list(requests[job.request].response_ids), dtype=torch.long)
    return out


@torch.no_grad()
def replay_forwards(
    model: Any,
    requests: Sequence[ReplayRequest],
    micro_batch_size: int,
    pad_token_id: int,
    device: torch.device,
    share_prefix: bool,
    token_head: _TokenLogProbHead | None = None,
) -> Iterator[list[tuple[_Job, torch.Tensor]]]:
    """The replay's forwards in order: per forward, each row's (job, (n_response, V) response logits); a prefix
    forward yields []. ``replay_relevance`` turns them into q (``benchmarks/q_precision.py`` reads them too).
    With ``token_head`` (active) each row's output is its (n_response,) sampled-token log-probs instead."""

    def rows_of(batch: list[_Job], out: torch.Tensor, keep: int) -> list[tuple[_Job, torch.Tensor]]:
        if token_head is not None:
            out = out[..., 0]
        return [(job, out[r, keep - job.n_response :]) for r, job in enumerate(batch)]

    def aim(batch: list[_Job] | None, keep: int = 0) -> None:
        if token_head is not None:
            token_head.targets = None if batch is None else _targets(requests, batch, keep)

    if not share_prefix:
        jobs = list(_jobs(requests))
        for s in range(0, len(jobs), micro_batch_size):
            batch = jobs[s : s + micro_batch_size]
            keep = max(job.n_response for job in batch)
            aim(batch, keep)
            logits = _response_logits(model, [job.ids for job in batch], keep, pad_token_id, device)
            yield rows_of(batch, logits, keep)
            del logits
        aim(None)
        return
    for group, row_batches in _plan(requests, micro_batch_size):
        prefix = None
        if any(r.prefix for r in group):
            aim(None)
            prefix = _prefix_cache(model, group, pad_token_id, device)
            yield []
        for rows in row_batches:
            keep = max(job.n_response for _, job in rows)
            aim([job for _, job in rows], keep)
            logits = _branch_logits(model, group, rows, prefix, keep, pad_token_id, device)
            yield rows_of([job for _, job in rows], logits, keep)
            del logits
        del prefix
    aim(None)


@torch.no_grad()
def replay_relevance(
    model: Any,
    requests: Sequence[ReplayRequest],
    num_rewards: int | None = None,
    temperature: float = 1.0,
    micro_batch_size: int = 4,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    pad_token_id: int = 0,
    min_forwards: int = 0,
    device: torch.device | str | None = None,
    progress: bool = False,
    share_prefix: bool = True,
    js_kernel: str = DEFAULT_JS_KERNEL,
    logits_fp32: bool = False,
    relevance: str = DEFAULT_RELEVANCE,
) -> tuple[torch.Tensor, int]:
    """Relevance q of every requested (response, reward) pair.

    With ``share_prefix`` (default) each response's contexts are split at their shared prefix (everything
    before the first token where full and any minus_k differ): one forward over the prefixes of up to
    ``micro_batch_size`` prefixes of similar length (responses sampled from one prompt share theirs), then the
    full and minus_k branches (the tokens after the prefix + the response) run on copies of that key/value
    cache, ``micro_batch_size`` rows a forward.
    A model whose attention cannot take such a cache (``prefix_sharing_unsupported``) replays every context
    whole, with a logged reason.

    Args:
        model: a causal LM accepting ``input_ids, attention_mask, position_ids, logits_to_keep`` and
            (prefix sharing) ``past_key_values`` (any HF model; a DeepSpeed engine wrapping one).
        requests: B ReplayRequests (``request_from_text`` / ``request_from_ids`` build them).
        num_rewards: K of the output (default: 1 + the largest reward index requested).
        temperature: the rollout's sampling temperature.
        micro_batch_size: contexts (branches) per forward, and responses per prefix forward.
        min_forwards: run dummy forwards until at least this many ran. With ZeRO-3 every rank must run
            the same number of forwards: pass the max of ``count_forwards`` over ranks.
        share_prefix: False forces the unshared replay (every context forwarded whole).
        js_kernel: ``compiled`` or ``eager`` (``js_relevance``'s ``kernel``).
        logits_fp32: the output layer in fp32 (``fp32_logits``) for a bf16 model.
        relevance: the measure (``core.relevance.RELEVANCE``). Its ``output`` decides what each forward returns:
            ``distributions``, the response logits; ``token_log_probs``, only the sampled token's log-probability
            (the output layer run a chunk of positions at a time, no (T, V) logits kept). A measure with a null
            context needs ``null_context`` in every request (``request_from_text(..., null=...)``).
    Returns:
        q: (B, K, T) float32 on CPU, T = longest response; q[i, k, t] is the measure's q at response
        token t (JS: the JS distance), 0 for pairs not replayed and beyond each response's end. A JOINT context's
        profile is written to every index in its request's ``joint_rewards``.
        forwards: the number of forwards run.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    K = num_rewards if num_rewards is not None else 1 + max((k for r in requests for k in r.rewards), default=-1)
    T = max((len(r.response_ids) for r in requests), default=0)
    q = torch.zeros((len(requests), K, T), dtype=torch.float32)
    measure = get_relevance(relevance)
    if not measure.null_context:  # a null context only a contrasting measure reads is not replayed
        requests = [replace(r, null_context=None) if r.null_context is not None else r for r in requests]
    if measure.null_context and any(_contexts(r) and r.null_context is None for r in requests):
        raise ValueError(f"relevance {relevance!r} contrasts with a null context: build the requests with null=...")
    device = torch.device(device) if device is not None else _model_device(model)
    if share_prefix and requests:
        reason = prefix_sharing_unsupported(model)
        if reason is not None:
            _log.warning("replay without prefix sharing: %s", reason)
            share_prefix = False

    jobs = list(_jobs(requests))
    options = {"temperature": temperature, "chunk_size": chunk_size, "kernel": js_kernel}
    profiles = _Profiles(requests, jobs, q, measure, options)
    total = count_forwards(requests, micro_batch_size, share_prefix)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max(total, min_forwards), desc="replay", unit="fwd")

    forwards = 0

    def step() -> None:
        nonlocal forwards
        forwards += 1
        if bar is not None:
            bar.update(1)

    token_head = None
    if measure.output == TOKEN_LOG_PROBS:
        head = token_head = _TokenLogProbHead(model, temperature, chunk_size, logits_fp32)
    else:
        assert measure.output == DISTRIBUTIONS
        head = fp32_logits(model) if logits_fp32 else contextlib.nullcontext()
    with head:
        for rows in replay_forwards(model, requests, micro_batch_size, pad_token_id, device, share_prefix, token_head):
            step()
            for job, logits in rows:
                profiles.add(job, logits)
            del rows
        while forwards < min_forwards:  # keep collective parameter gathers in step across ranks
            _response_logits(model, [[pad_token_id, pad_token_id]], 1, pad_token_id, device)
            step()
    if bar is not None:
        bar.close()
    return q, forwards


def localization(q: torch.Tensor, mask: torch.Tensor, top_frac: float = 0.2) -> torch.Tensor:
    """Share of each row's total distance held by its top ``top_frac`` tokens.

    q: (..., T), mask: (..., T) -> (...,) in [0, 1]; rows with no distance give NaN.
    """
    qv = q.float() * mask.float()
    n_valid = mask.sum(dim=-1)
    k = (n_valid.float() * top_frac).ceil().long().clamp_min(1)
    srt = qv.sort(dim=-1, descending=True).values
    ranks = torch.arange(q.shape[-1], device=q.device)
    top = (srt * (ranks < k.unsqueeze(-1))).sum(dim=-1)
    total = qv.sum(dim=-1)
    return torch.where(total > 0, top / total.clamp_min(1e-30), torch.full_like(total, float("nan")))


def tokens_for_mass(q: torch.Tensor, mask: torch.Tensor, mass: float = 0.8) -> torch.Tensor:
    """Fraction of valid tokens needed to hold ``mass`` of each row's distance (paper: 80%).

    q: (..., T), mask: (..., T) -> (...,); rows with no distance give NaN.
    """
    qv = q.float() * mask.float()
    total = qv.sum(dim=-1, keepdim=True)
    cum = qv.sort(dim=-1, descending=True).values.cumsum(dim=-1)
    needed = (cum < mass * total).sum(dim=-1) + 1
    n_valid = mask.sum(dim=-1).float()
    frac = needed.float() / n_valid.clamp_min(1)
    return torch.where(total.squeeze(-1) > 0, frac.clamp(max=1.0), torch.full_like(frac, float("nan")))
