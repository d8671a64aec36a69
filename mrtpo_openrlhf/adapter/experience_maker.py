"""The experience maker: per-reward GDPO advantages, replay on the actor group, token advantages.

Replaces upstream's ``compute_advantages_and_returns`` for the estimators registered in
``core.ADVANTAGE_ESTIMATORS`` (``gdpo``, ``mrtpo``; other estimators run upstream's code unchanged). Per step:

1. length penalties (upstream's ``apply_length_penalties``) act on the scalar reward; their change p
   (reward units) is kept aside: it is not a verifier reward and is not normalized;
2. ``core.response_advantages`` on the whole (N, K) reward matrix: per-reward group advantages A (a NaN/Inf
   value counting as absent), SAW weights, GDPO's response level;
3. when the step's placement reads relevance (``mrtpo``, beta > 0, a placement that replays): every (response, reward)
   pair with a non-zero advantage and a non-empty block is replayed on the actor group, the same number of
   forwards on every rank;
4. each micro-batch's rows and q go to the registered estimator, which returns the (B, A) token advantages
   (placement, GDPO's batch step over the whole rollout batch, p added at its own size, ``--reward.clip_range``);
5. KL in the reward (no ``--algo.kl.use_loss``): the per-token ``-kl_coef * kl`` penalty is added
   as its reward-to-go, exactly as upstream's group estimators do. It is not a verifier reward and
   is not re-placed.
The result is the (B, A) ``advantages`` (and ``returns``) upstream's PolicyLoss consumes.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from ..core import (
    ADVANTAGE_ESTIMATORS,
    DEFAULT_NULL_BLOCK,
    DEFAULT_RELEVANCE,
    JOINT_REPLAY,
    PROMPT_IDS_MISMATCH,
    MethodSettings,
    ReplayRequest,
    TokenInputs,
    count_forwards,
    get_placement,
    get_relevance,
    localization,
    request_for_rollout,
    response_advantages,
    tokens_for_mass,
)
from ..diagnostics.run_page import RunSamples
from ..rewards.contract import RewardVector
from .ranks import get_ranks
from .transport import pop_reward_vectors

logger = logging.getLogger(__name__)

LENGTH_PENALTY = "length_penalty"
DUMP_ENV = "MRTPO_DUMP_ADVANTAGES"  # a folder: each step's advantages are saved there (tests, debugging)
REWARD_LOW = 0.0  # the lowest possible value of every shipped reward (all are 0/1); SAW shifts by it


@dataclass
class RewardBatch:
    """The whole rollout batch's rewards as tensors, rows in original rollout order (``experience.index``).

    Built from the per-response ``RewardVector``s (``from_vectors``); K is the largest K of the batch.
    values/present: (N, K), present 0 where a row has fewer rewards; names/blocks: N lists of K strings ("" pads
    missing rewards); spans: N entries, None (the reward function records no spans) or K block spans in the
    prompt (None pads).
    """

    values: torch.Tensor
    present: torch.Tensor
    names: list[list[str]]
    blocks: list[list[str]]
    spans: list | None = None
    nonfinite: int = 0  # values dropped as verifier failures (``drop_nonfinite``)

    @classmethod
    def from_vectors(cls, experiences: Sequence[Any], vectors: Sequence[Sequence[RewardVector]]) -> RewardBatch:
        """Merge each micro-batch's vectors (``vectors[i][row]`` belongs to ``experiences[i].index[row]``)."""
        n = sum(len(e.index) for e in experiences)
        k = max(len(v.items) for per in vectors for v in per)
        values = torch.zeros(n, k)
        present = torch.zeros(n, k)
        names: list[list[str]] = [[] for _ in range(n)]
        blocks: list[list[str]] = [[] for _ in range(n)]
        spans: list = [None] * n
        for exp, per in zip(experiences, vectors):
            if len(per) != len(exp.index):
                raise RuntimeError(f"{len(per)} reward vectors for a micro-batch of {len(exp.index)} responses")
            for vec, g in zip(per, exp.index):
                kk = len(vec.items)
                values[g, :kk] = torch.tensor(vec.values)
                present[g, :kk] = 1.0
                names[g] = vec.names + [""] * (k - kk)
                blocks[g] = [it.block for it in vec.items] + [""] * (k - kk)
                spans[g] = None if vec.spans is None else [None if sp is None else tuple(sp) for sp in vec.spans]
                if spans[g] is not None:
                    spans[g] += [None] * (k - kk)
        return cls(values, present, names, blocks, spans)


def drop_nonfinite(batch: RewardBatch) -> RewardBatch:
    """A NaN or infinite reward value is a verifier failure: that reward is absent for that response (value 0,
    present 0, no part in its group's statistics), with the reason logged; every other value is kept."""
    bad = ~torch.isfinite(batch.values) & (batch.present > 0)
    if not bool(bad.any()):
        return batch
    for g, k in bad.nonzero().tolist():
        logger.warning(
            "reward %r of response %d is %s: verifier failure, the reward counts as absent for it",
            batch.names[g][k],
            g,
            float(batch.values[g, k]),
        )
    values = torch.where(bad, torch.zeros_like(batch.values), batch.values)
    return RewardBatch(values, batch.present * ~bad, batch.names, batch.blocks, batch.spans, int(bad.sum()))


def name_ids(names: Sequence[Sequence[str]]) -> torch.Tensor:
    """(N, K) int id of each reward name ("" padding: -1), so statistics can be taken per name."""
    table: dict[str, int] = {}
    return torch.tensor(
        [[table.setdefault(n, len(table)) if n else -1 for n in row] for row in names], dtype=torch.long
    )


def check_groups(batch: RewardBatch, group_size: int) -> None:
    """Rewards are normalized per name inside a prompt's group: the names must agree there."""
    for start in range(0, len(batch.names), group_size):
        first = batch.names[start]
        for j in range(start + 1, start + group_size):
            if batch.names[j] != first:
                raise ValueError(
                    f"reward names differ inside one prompt's group (rows {start} and {j}): {first} vs "
                    f"{batch.names[j]}. A reward function must return the same K names for every response "
                    "to one prompt (the contract's fallback names keep K fixed on failures)."
                )


def response_span(sequence: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor):
    """(prompt ids, response ids, first action column) of one right-padded row.

    action_mask column c marks token c + 1 of the sequence (upstream's shift by one).
    """
    tokens = sequence[attention_mask.bool()].tolist()
    cols = action_mask.bool().nonzero(as_tuple=True)[0]
    if cols.numel() == 0:
        return tokens, [], 0
    first, last = int(cols[0]), int(cols[-1])
    return tokens[: first + 1], tokens[first + 1 : last + 2], first


def split_for_ranks(costs: Sequence[int], num_ranks: int, groups: Sequence[int] | None = None) -> list[list[int]]:
    """Greedy longest-first assignment of items to ranks, balancing total cost.

    groups: a key per item; items with one key go to one rank (the responses to one prompt, so that the replay's
    shared prompt forward is not repeated on several ranks).
    """
    keys = list(groups) if groups is not None else list(range(len(costs)))
    members: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    loads = [0] * num_ranks
    parts: list[list[int]] = [[] for _ in range(num_ranks)]
    for key in sorted(members, key=lambda k: -sum(costs[i] for i in members[k])):
        r = min(range(num_ranks), key=lambda r: loads[r])
        parts[r].extend(members[key])
        loads[r] += sum(costs[i] for i in members[key])
    return [sorted(p) for p in parts]


class MRTPOExperienceMaker(RemoteExperienceMaker):
    """Upstream's RemoteExperienceMaker with the GDPO and MRTPO estimators."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.global_step = 0  # the trainer sets it before each step (beta warm-up, shuffle seed)
        self.last_metrics: dict[str, float] = {}

    unseen_weight_names: frozenset[str] = frozenset()  # --algo.mrtpo.reward_weights names already warned about

    @property
    def mrtpo_args(self):
        return self.args.algo.mrtpo

    def pop_metrics(self) -> dict[str, float]:
        metrics, self.last_metrics = self.last_metrics, {}
        return metrics

    # ── advantages ──

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences):
        vectors = [pop_reward_vectors(e) for e in experiences]
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            if all(vectors):
                self.last_metrics = self._reward_metrics(RewardBatch.from_vectors(experiences, vectors), None)
            return super().compute_advantages_and_returns(experiences)
        if not all(vectors):
            raise RuntimeError("reward vectors missing: the MRTPO samples generator did not run for these samples")
        return self._multi_reward_advantages(experiences, vectors)

    def _multi_reward_advantages(self, experiences, vectors):
        args = self.args
        group_size = args.rollout.n_samples_per_prompt
        for e in experiences:
            # (B, 1) rewards (a JSON-list reward) are (B,) here, as upstream's group estimators read them
            e.rewards = e.rewards.to(torch.promote_types(e.rewards.dtype, torch.float32)).reshape(len(e.index))
        batch = drop_nonfinite(RewardBatch.from_vectors(experiences, vectors))
        for e in experiences:
            # a non-finite scalar is the sum of a vector holding a failure: recompute it without the absent values
            total = (batch.values[e.index] * batch.present[e.index]).sum(1).to(e.rewards.dtype)
            e.rewards = torch.where(torch.isfinite(e.rewards), e.rewards, total)
        before = [e.rewards.clone() for e in experiences]
        apply_length_penalties(experiences, args)
        penalty = torch.zeros(len(batch.names))  # in reward units; added after the normalizations, uniformly
        for e, b in zip(experiences, before):
            penalty[torch.tensor(e.index)] = (e.rewards - b).float()
        check_groups(batch, group_size)

        settings = MethodSettings.from_args(args)
        estimator = ADVANTAGE_ESTIMATORS[self.advantage_estimator]
        response = response_advantages(
            batch.values, batch.present, group_size, settings, name_ids(batch.names), REWARD_LOW, penalty, batch.names
        )
        adv = response.group
        placement = estimator.placement(settings, self.global_step)
        replay = self._replay(experiences, batch, adv, placement.mode) if placement.needs_relevance else None
        generator = torch.Generator().manual_seed(int(args.train.seed) * 100_003 + self.global_step)

        cap_counts = [0, 0]  # tokens where the cap changed the advantage, valid tokens
        dump = {} if os.environ.get(DUMP_ENV) else None
        # a few replayed rows for the run's credit page (diagnostics/run_page.py), beside metrics.jsonl
        page = RunSamples.from_env(self.tokenizer, self.global_step, getattr(replay, "measure", None))
        for e in experiences:
            rows = torch.tensor(e.index)
            mask = e.action_mask.bool()
            q = None
            if replay is not None:
                q = torch.zeros(len(e.index), adv.shape[1], mask.shape[1])
                for j, g in enumerate(e.index):
                    if g in replay.q:
                        first, qg = replay.q[g]
                        q[j, :, first : first + qg.shape[1]] = qg
            out = estimator(response, TokenInputs(rows, mask, q, self.global_step, generator), settings, placement)
            a = out.advantages
            if page is not None and q is not None:
                page.keep(e, q, a, response, batch, placement)
            cap_counts[0] += int(out.cap_binding.sum())
            cap_counts[1] += int(mask.sum())
            if dump is not None:
                for j, g in enumerate(e.index):
                    dump[g] = {
                        "advantages": a[j][mask[j]].clone(),
                        "gdpo": float(response.level[g]),
                        "sequence": e.sequences[j][e.attention_mask[j].bool()].clone(),
                    }
                    if replay is not None and g in replay.q:  # what the ranks replayed and the q they returned
                        dump[g]["replay_request"] = replay.requests[g]
                        dump[g]["q"] = replay.q[g][1].clone()
            if e.kl is not None and not args.algo.kl.use_loss:
                kl_penalty = compute_reward(
                    torch.zeros(len(e.index)), self.kl_ctl.value, e.kl, action_mask=e.action_mask
                )
                a = a + self.get_cumulative_returns(kl_penalty, e.action_mask, 1.0)
            e.advantages = a.float()
            if dump is not None:  # what the loss gets: the KL-in-reward term added
                for j, g in enumerate(e.index):
                    dump[g]["final"] = e.advantages[j][mask[j]].clone()
            e.returns = e.advantages.clone()
            e.info["return"] = e.rewards.float()
            e.info["group_reward_std"] = self._group_std(batch, group_size)[rows]
            e.kl = None
        if dump is not None:
            self._dump(dump, placement.beta, placement.mode)
        if page is not None:
            page.write()
        self.last_metrics = self._reward_metrics(batch, adv)
        if bool((penalty != 0).any()):
            self.last_metrics[f"reward/{LENGTH_PENALTY}/mean"] = float(penalty.mean())
        self.last_metrics["mrtpo/beta"] = placement.beta
        self.last_metrics.update(self._fixed_weight_metrics(settings, batch))
        self.last_metrics["mrtpo/nonfinite_rewards"] = float(batch.nonfinite)
        self.last_metrics["mrtpo/cap_binding_frac"] = cap_counts[0] / max(cap_counts[1], 1)
        if replay is not None:
            self.last_metrics.update(replay.metrics)
        return experiences

    def _dump(self, rows: dict, beta: float, mode: str) -> None:
        """Write this step's token advantages (``advantages``: before the KL term; ``final``: with it), GDPO's
        response-level advantage on the same batch, the sequence (prompt + response ids) and, for replayed rows,
        the ReplayRequest and the (K, L) q the actor ranks returned, to $MRTPO_DUMP_ADVANTAGES/step<N>.pt, for the
        end-to-end checks of the placement and of the multi-rank replay."""
        folder = os.environ[DUMP_ENV]
        os.makedirs(folder, exist_ok=True)
        torch.save(
            {
                "step": self.global_step,
                "estimator": self.advantage_estimator,
                "beta": beta,
                "placement": mode,
                "rows": rows,
            },
            os.path.join(folder, f"step{self.global_step}.pt"),
        )

    def _fixed_weight_metrics(self, settings: MethodSettings, batch: RewardBatch) -> dict[str, float]:
        """``mrtpo/reward_weight/<name>`` for each ``--algo.mrtpo.reward_weights`` entry; a name no reward of this
        batch carries is warned about once (a typo would weigh nothing)."""
        seen = {name for row in batch.names for name in row}
        for name, _ in settings.reward_weights:
            if name not in seen and name not in self.unseen_weight_names:
                self.unseen_weight_names = self.unseen_weight_names | {name}
                logger.warning(
                    "[mrtpo] --algo.mrtpo.reward_weights names %r, which no reward of this batch has (names: %s)",
                    name,
                    ", ".join(sorted(n for n in seen if n)),
                )
        return {f"mrtpo/reward_weight/{name}": float(w) for name, w in settings.reward_weights}

    @staticmethod
    def _group_std(batch: RewardBatch, group_size: int) -> torch.Tensor:
        """(N,) std of the summed reward inside each row's group (upstream's group_reward_std)."""
        total = batch.values.sum(1).reshape(-1, group_size)
        return total.std(dim=1, keepdim=True).expand(-1, group_size).reshape(-1)

    def _reward_metrics(self, batch: RewardBatch, adv: torch.Tensor | None) -> dict[str, float]:
        """By reward name: the reward's mean and std over the batch (``reward/<name>/mean|std``, TRL's
        ``rewards/<name>/mean|std``; std with Bessel's correction, as TRL's), and its GDPO advantage's std."""
        values = defaultdict(list)
        advs = defaultdict(list)
        for g, names in enumerate(batch.names):
            for k, name in enumerate(names):
                if name and batch.present[g, k] > 0:
                    values[name].append(float(batch.values[g, k]))
                    if adv is not None:
                        advs[name].append(float(adv[g, k]))
        out = {f"reward/{n}/mean": sum(v) / len(v) for n, v in values.items()}
        out.update({f"reward/{n}/std": float(torch.tensor(v).std()) if len(v) > 1 else 0.0 for n, v in values.items()})
        for n, a in advs.items():
            out[f"reward/{n}/adv_std"] = float(torch.tensor(a).std()) if len(a) > 1 else 0.0
        n_pairs = float(batch.present.sum())
        if adv is not None and n_pairs:
            out["mrtpo/varying_pairs_frac"] = float(((adv != 0) & (batch.present > 0)).sum()) / n_pairs
        return out

    # ── replay ──

    def build_requests(self, experiences, batch: RewardBatch, adv: torch.Tensor, placement: str):
        """ReplayRequests for every response with at least one pair to replay, keyed by global row.

        Contexts start from the rollout's own prompt ids (``core.request_for_rollout``); a relevance measure that
        contrasts with the null block gets the task's null context too (``null_block``).
        Returns ({row: (request, first action column)}, {reason: number of pairs skipped}).
        """
        margs = self.mrtpo_args
        joint = get_placement(placement).replay == JOINT_REPLAY
        null = self.null_block() if get_relevance(self.relevance).null_context else None
        requests: dict[int, tuple[ReplayRequest, int]] = {}
        skipped: dict[str, int] = defaultdict(int)
        for e in experiences:
            for j, g in enumerate(e.index):
                ks = [k for k in range(adv.shape[1]) if adv[g, k] != 0 and batch.blocks[g][k]]
                if not ks:
                    continue
                prompt_ids, response, first = response_span(e.sequences[j], e.attention_mask[j], e.action_mask[j])
                if not response:
                    continue
                spans = batch.spans[g] if batch.spans is not None else None
                req, left_out = request_for_rollout(
                    self.tokenizer,
                    e.prompts[j],
                    prompt_ids,
                    batch.blocks[g],
                    response,
                    ks,
                    margs.block_separator,
                    joint,
                    spans,
                    null,
                )
                for reason in left_out.values():
                    skipped[reason] += 1
                if req.minus_contexts:
                    requests[g] = (req, first)
        if skipped:
            logger.warning("MRTPO replay skipped pairs: %s", dict(skipped))
        return requests, dict(skipped)

    @property
    def relevance(self) -> str:
        return getattr(self.mrtpo_args, "relevance", DEFAULT_RELEVANCE)

    def null_block(self):
        """The null block of the task whose reward file this run trains on (``tasks.task_of_reward`` of the first
        ``--reward.remote_url`` entry, the one upstream loads), or the default (``core.null_block``) for any other
        reward (a user's own file, a reward server's URL)."""
        if not hasattr(self, "_null_block"):
            from ..tasks import task_of_reward

            first = str(getattr(self.args.reward, "remote_url", None) or "").split(",")[0].strip()
            task = task_of_reward(first) if first.endswith(".py") else None
            self._null_block = task.null_block() if task is not None else DEFAULT_NULL_BLOCK
        return self._null_block

    def _replay(self, experiences, batch: RewardBatch, adv: torch.Tensor, placement: str):
        margs = self.mrtpo_args
        t0 = time.time()
        requests, skipped = self.build_requests(experiences, batch, adv, placement)
        group = self.actor_model_group
        num_ranks = len(group._actor_handlers) // group.duplicate_actors  # noqa: SLF001
        rows = sorted(requests)
        costs = [count_forwards([requests[g][0]], 1) for g in rows]
        group_size = self.args.rollout.n_samples_per_prompt
        parts = split_for_ranks(costs, num_ranks, [g // group_size for g in rows])
        rank_requests = [[requests[rows[i]][0] for i in part] for part in parts]
        mbs = margs.replay_micro_batch_size
        forwards = max((count_forwards(r, mbs) for r in rank_requests), default=0)
        q: dict[int, tuple[int, torch.Tensor]] = {}
        if forwards > 0:
            refs = group.async_run_method_batch(
                method_name="replay_relevance",
                requests=rank_requests,
                min_forwards=[forwards] * num_ranks,
                num_rewards=[adv.shape[1]] * num_ranks,
                temperature=[float(self.args.rollout.temperature)] * num_ranks,
                micro_batch_size=[mbs] * num_ranks,
                chunk_size=[margs.chunk_size] * num_ranks,
                js_kernel=[margs.js_kernel] * num_ranks,
                logits_fp32=[margs.replay_logits == "fp32"] * num_ranks,
                relevance=[self.relevance] * num_ranks,
            )
            # refs[i] runs on rank i (duplicate_actors is 1: MRTPO refuses ring attention and DeepSpeed TP); the
            # first rank to fail fails the step at once instead of leaving the others in a ZeRO-3 gather
            ranks = group._actor_handlers  # noqa: SLF001
            results = list(itertools.chain.from_iterable(get_ranks(refs, ranks, "the MRTPO replay")))
            if self.args.train.colocate_all or self.args.train.colocate_actor_ref:
                get_ranks(group.async_run_method(method_name="empty_cache"), ranks, "empty_cache after the replay")
            for part, q_rank in zip(parts, results):
                for local, i in enumerate(part):
                    g = rows[i]
                    req, first = requests[g]
                    q[g] = (first, q_rank[local, :, : len(req.response_ids)])
        metrics = self._replay_metrics(batch, q, requests)
        metrics[f"mrtpo/skipped_pairs/{PROMPT_IDS_MISMATCH}"] = 0.0
        for reason, count in skipped.items():
            metrics[f"mrtpo/skipped_pairs/{reason}"] = float(count)
        metrics["mrtpo/replay_time"] = time.time() - t0
        metrics["mrtpo/replay_forwards_per_rank"] = float(forwards)
        return _Replay(q, metrics, {g: requests[g][0] for g in q})

    @staticmethod
    def _replay_metrics(batch: RewardBatch, q, requests) -> dict[str, float]:
        n_pairs = float(batch.present.sum()) or 1.0
        replayed = sum(len(requests[g][0].rewards) for g in q)
        out = {"mrtpo/replayed_pairs_frac": replayed / n_pairs}
        top = defaultdict(list)
        mass = defaultdict(list)
        for g, (_, qg) in q.items():
            mask = torch.ones(qg.shape[1], dtype=torch.bool)
            for k in requests[g][0].rewards:
                if float(qg[k].sum()) > 0:
                    name = batch.names[g][k]
                    top[name].append(float(localization(qg[k], mask)))
                    mass[name].append(float(tokens_for_mass(qg[k], mask)))
        for name in top:
            out[f"mrtpo/{name}/top20_share"] = sum(top[name]) / len(top[name])
            out[f"mrtpo/{name}/tokens_for_80pct"] = sum(mass[name]) / len(mass[name])
        return out


@dataclass
class _Replay:
    q: dict[int, tuple[int, torch.Tensor]]  # global row -> (first action column, (K, L) relevance)
    metrics: dict[str, float]
    requests: dict[int, ReplayRequest]  # global row -> what was replayed (kept for the dumps)
