"""The MRTPO/GDPO command-line flags, hooked into upstream's inline argparse parser.

Upstream builds its parser under ``if __name__ == "__main__"`` in ``openrlhf/cli/train_ppo_ray.py``
with hard-coded estimator choices. ``extend_parser`` adds ``gdpo`` and ``mrtpo`` to those choices
and our flags to the parser; ``validate`` rejects combinations MRTPO cannot run with. All upstream
flags and validation stay as they are.
"""
from __future__ import annotations

import argparse

MULTI_REWARD_ESTIMATORS = ("gdpo", "mrtpo")
ESTIMATOR_DEST = "algo.advantage.estimator"


DEFAULT_CAP = 1.5  # chosen from the binding rates measured with SmolLM2's replay on the mini sets: docs/cap.md


def parse_cap(text: str) -> float | None:
    """``--algo.mrtpo.cap``: a number, or ``none`` (no cap)."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 1 or 'none', got {text!r}") from None


def add_mrtpo_arguments(parser: argparse.ArgumentParser) -> None:
    """Our flags, all under ``--algo.mrtpo.*`` (they arrive as ``args.algo.mrtpo.<name>``)."""
    g = parser.add_argument_group("MRTPO / GDPO (mrtpo-openrlhf)")
    g.add_argument("--algo.mrtpo.beta", type=float, default=0.5,
                   help="placement strength beta_max in w = (1-beta) + beta*q/mean(q) (paper: 0.5)")
    g.add_argument("--algo.mrtpo.warmup_steps", type=int, default=10,
                   help="beta ramps linearly from 0 to beta over this many steps (paper: N = 10)")
    g.add_argument("--algo.mrtpo.cap", type=parse_cap, default=DEFAULT_CAP,
                   help="a token may receive at most CAP times the largest single reward's reallocation "
                        f"(>= 1, or 'none' to switch it off; default {DEFAULT_CAP}, see docs/cap.md)")
    g.add_argument("--algo.mrtpo.placement", choices=["mrtpo", "shuffle", "joint", "uniform"], default="mrtpo",
                   help="ablations: shuffle (weights permuted within each response), joint (one replay "
                        "without any block, one profile for all rewards), uniform (GDPO placement)")
    g.add_argument("--algo.mrtpo.reward_weighting", choices=["none", "saw"], default="none",
                   help="response-level reward weights stacked under the placement (saw: weights from "
                        "each reward's coefficient of variation in the batch)")
    g.add_argument("--algo.mrtpo.eps", type=float, default=1e-4, help="epsilon of GDPO's two normalizations")
    g.add_argument("--algo.mrtpo.replay_micro_batch_size", type=int, default=4,
                   help="contexts per replay forward on each actor rank")
    g.add_argument("--algo.mrtpo.chunk_size", type=int, default=256,
                   help="positions per chunk of the JS computation (memory O(chunk * vocab))")
    g.add_argument("--algo.mrtpo.block_separator", type=str, default="\n\n",
                   help="text put before each verifier block in the replay contexts")


def _find_action(parser: argparse.ArgumentParser, dest: str) -> argparse.Action | None:
    return next((a for a in parser._actions if a.dest == dest), None)  # noqa: SLF001 - argparse has no API


def extend_parser(parser: argparse.ArgumentParser) -> bool:
    """Add our estimators and flags to upstream's parser. Returns False if it is not that parser."""
    action = _find_action(parser, ESTIMATOR_DEST)
    if action is None:
        return False
    if action.choices is not None:
        action.choices = list(action.choices) + [c for c in MULTI_REWARD_ESTIMATORS if c not in action.choices]
    if _find_action(parser, "algo.mrtpo.beta") is None:
        add_mrtpo_arguments(parser)
    return True


def validate(flat: argparse.Namespace, error=None) -> None:
    """Reject combinations MRTPO/GDPO cannot run with (on the flat, dotted namespace).

    ``error(msg)`` reports (argparse's ``parser.error`` exits with usage); default raises ValueError.
    """
    def fail(msg: str):
        if error is not None:
            error(msg)
        raise ValueError(msg)

    get = lambda name, default=None: getattr(flat, name, default)  # noqa: E731
    estimator = get(ESTIMATOR_DEST)
    if estimator not in MULTI_REWARD_ESTIMATORS:
        return
    if (get("rollout.n_samples_per_prompt", 1) or 1) < 2:
        fail(f"--algo.advantage.estimator {estimator} normalizes each reward inside a prompt's group: "
             f"--rollout.n_samples_per_prompt must be >= 2 (got {get('rollout.n_samples_per_prompt')})")
    if get("train.async_enable", False):
        fail(f"--algo.advantage.estimator {estimator} runs in the synchronous trainer only: drop --train.async_enable")
    if (get("ds.ring_attn_size", 1) or 1) > 1:
        fail(f"--algo.advantage.estimator {estimator} does not support ring attention (--ds.ring_attn_size > 1)")
    if (get("ds.tensor_parallel_size", 1) or 1) > 1:
        fail(f"--algo.advantage.estimator {estimator} does not support DeepSpeed tensor parallelism "
             "(--ds.tensor_parallel_size > 1)")
    if not get("reward.remote_url"):
        fail(f"--algo.advantage.estimator {estimator} needs a multi-reward function: pass --reward.remote_url "
             "(e.g. reward_funcs/sql.py)")
    if get("train.agent_func_path"):
        fail(f"--algo.advantage.estimator {estimator} does not support --train.agent_func_path (multi-turn agents)")
    beta = get("algo.mrtpo.beta", 0.5)
    if not 0.0 <= beta <= 1.0:
        fail(f"--algo.mrtpo.beta must be in [0, 1], got {beta}")
    cap = get("algo.mrtpo.cap")
    if cap is not None and cap < 1.0:
        fail(f"--algo.mrtpo.cap must be >= 1 (a single reward's own credit is never clipped), got {cap}")
    if get("algo.mrtpo.warmup_steps", 0) < 0:
        fail("--algo.mrtpo.warmup_steps must be >= 0")
    if get("algo.mrtpo.replay_micro_batch_size", 1) < 1 or get("algo.mrtpo.chunk_size", 1) < 1:
        fail("--algo.mrtpo.replay_micro_batch_size and --algo.mrtpo.chunk_size must be >= 1")
    if estimator == "gdpo" and get("algo.mrtpo.placement", "mrtpo") != "mrtpo":
        fail("--algo.mrtpo.placement applies to --algo.advantage.estimator mrtpo only")


class ParserHook:
    """Context manager: while active, upstream's parser gains our flags and validation.

    Patches ``ArgumentParser.parse_args`` so the hook applies to whichever parser holds
    ``--algo.advantage.estimator`` (upstream's, built inline under ``__main__``).
    """

    def __init__(self, after=None):
        self.after = after  # called with the parsed, validated namespace (e.g. a device check)

    def __enter__(self):
        self._original = argparse.ArgumentParser.parse_args
        original = self._original

        def parse_args(parser, args=None, namespace=None):
            hooked = extend_parser(parser)
            parsed = original(parser, args, namespace)
            if hooked:
                validate(parsed, parser.error)
                if self.after is not None:
                    self.after(parsed)
            return parsed

        argparse.ArgumentParser.parse_args = parse_args
        return self

    def __exit__(self, *exc):
        argparse.ArgumentParser.parse_args = self._original
        return False
