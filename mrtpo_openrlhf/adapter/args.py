"""The MRTPO/GDPO command-line flags, hooked into upstream's inline argparse parser.

Upstream builds its parser under ``if __name__ == "__main__"`` in ``openrlhf/cli/train_ppo_ray.py``
with hard-coded estimator choices. ``extend_parser`` adds the registered estimators (``core.ADVANTAGE_ESTIMATORS``)
to those choices and our flags to the parser; ``flag_problems`` names every combination MRTPO cannot run with (the
hook prints one line each, and every parser error without the usage text);
``ineffective_flags`` names the ``--algo.mrtpo.*`` flags given that the chosen estimator does not read (warned
about, one line). All upstream flags and validation stay as they are. Defaults and choices come from the core.
"""

from __future__ import annotations

import argparse
import sys

from ..core import estimators as _estimators
from ..core import settings as _settings
from ..core.placements import placement_help, placement_modes
from ..core.relevance import relevance_help, relevance_names

MULTI_REWARD_ESTIMATORS = tuple(_estimators.ADVANTAGE_ESTIMATORS)
ESTIMATOR_DEST = "algo.advantage.estimator"
MRTPO_PREFIX = "algo.mrtpo."


class _StoreGiven(argparse.Action):
    """``store`` that remembers the flag was given on the command line (defaults never call an action)."""

    given = False

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        self.given = True


def parse_cap(text: str) -> float | None:
    """``--algo.mrtpo.cap``: a number, or ``none`` (no cap)."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 1 or 'none', got {text!r}") from None


def parse_reward_weights(text: str) -> tuple[tuple[str, float], ...]:
    """``--algo.mrtpo.reward_weights``: ``name=w,...`` (``core.settings.parse_reward_weights``)."""
    try:
        return _settings.parse_reward_weights(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_mrtpo_arguments(parser: argparse.ArgumentParser) -> None:
    """Our flags, all under ``--algo.mrtpo.*`` (they arrive as ``args.algo.mrtpo.<name>``)."""
    s = _settings
    g = parser.add_argument_group("MRTPO / GDPO (mrtpo-openrlhf)")
    add = lambda name, **kw: g.add_argument(f"--{MRTPO_PREFIX}{name}", action=_StoreGiven, **kw)  # noqa: E731
    add(
        "beta",
        type=float,
        default=s.DEFAULT_BETA,
        help=f"placement strength beta_max in w = (1-beta) + beta*q/mean(q) (default {s.DEFAULT_BETA})",
    )
    add(
        "warmup_steps",
        type=int,
        default=s.DEFAULT_WARMUP_STEPS,
        help=f"beta ramps linearly from 0 to beta over this many steps (default {s.DEFAULT_WARMUP_STEPS})",
    )
    add(
        "cap",
        type=parse_cap,
        default=s.DEFAULT_CAP,
        help="a token may receive at most CAP times the largest single reward's reallocation "
        f"(>= 1, or 'none' to switch it off; default {s.DEFAULT_CAP}, see docs/cap.md)",
    )
    add(
        "placement",
        choices=placement_modes(),
        default=s.DEFAULT_PLACEMENT,
        help="; ".join(f"{mode}: {text}" for mode, text in placement_help().items()) + " (mrtpo estimator only)",
    )
    add(
        "relevance",
        choices=relevance_names(),
        default=s.DEFAULT_RELEVANCE,
        help="how the replay measures q (any placement over any measure): "
        + "; ".join(f"{name}: {text}" for name, text in relevance_help().items()).replace("%", "%%"),
    )
    add(
        "reward_weighting",
        choices=s.REWARD_WEIGHTINGS,
        default=s.DEFAULT_REWARD_WEIGHTING,
        help="response-level reward weights stacked under the placement (saw: weights from "
        "each reward's coefficient of variation in the batch)",
    )
    add(
        "reward_weights",
        type=parse_reward_weights,
        default=s.DEFAULT_REWARD_WEIGHTS,
        metavar="NAME=W,...",
        help="fixed weights on GDPO's response level, e.g. format=0.5,execution=2 (a reward not named weighs 1; "
        "times SAW's weights with --algo.mrtpo.reward_weighting saw; verl's gdpo_reward_weights, TRL's "
        "reward_weights)",
    )
    add("eps", type=float, default=s.DEFAULT_EPS, help="epsilon of GDPO's two normalizations")
    add(
        "replay_micro_batch_size",
        type=int,
        default=s.DEFAULT_REPLAY_MICRO_BATCH_SIZE,
        help="contexts per replay forward on each actor rank",
    )
    add(
        "chunk_size",
        type=int,
        default=s.DEFAULT_CHUNK_SIZE,
        help="positions per chunk of the JS computation (memory O(chunk * vocab))",
    )
    add(
        "js_kernel",
        choices=s.JS_KERNELS,
        default=s.DEFAULT_JS_KERNEL,
        help="how the JS distance runs: compiled (torch.compile, one fused kernel; eager with a logged reason if "
        "the compile fails) or eager",
    )
    add(
        "replay_logits",
        choices=s.REPLAY_LOGITS,
        default=s.DEFAULT_REPLAY_LOGITS,
        help="the replay's output layer: in the model's dtype (model) or in fp32 (bf16 rounding of the logits "
        "alone puts a floor of ~20%% of the real q under q; costs logits twice the size)",
    )
    add(
        "block_separator",
        type=str,
        default=s.DEFAULT_BLOCK_SEPARATOR,
        help="text put before each verifier block in the replay contexts",
    )


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


def flag_problems(flat: argparse.Namespace) -> list[str]:
    """Every combination MRTPO/GDPO cannot run with (on the flat, dotted namespace), one message each."""
    problems: list[str] = []
    fail = problems.append
    get = lambda name, default=None: getattr(flat, name, default)  # noqa: E731
    estimator = get(ESTIMATOR_DEST)
    if estimator not in MULTI_REWARD_ESTIMATORS:
        return problems
    if (get("rollout.n_samples_per_prompt", 1) or 1) < 2:
        fail(
            f"--algo.advantage.estimator {estimator} normalizes each reward inside a prompt's group: "
            f"--rollout.n_samples_per_prompt must be >= 2 (got {get('rollout.n_samples_per_prompt')})"
        )
    if get("train.async_enable", False):
        fail(f"--algo.advantage.estimator {estimator} runs in the synchronous trainer only: drop --train.async_enable")
    if (get("ds.ring_attn_size", 1) or 1) > 1:
        fail(f"--algo.advantage.estimator {estimator} does not support ring attention (--ds.ring_attn_size > 1)")
    if (get("ds.tensor_parallel_size", 1) or 1) > 1:
        fail(
            f"--algo.advantage.estimator {estimator} does not support DeepSpeed tensor parallelism "
            "(--ds.tensor_parallel_size > 1)"
        )
    if not get("reward.remote_url"):
        fail(
            f"--algo.advantage.estimator {estimator} needs a multi-reward function: pass --reward.remote_url "
            "(e.g. reward_funcs/sql.py)"
        )
    if get("train.agent_func_path"):
        fail(f"--algo.advantage.estimator {estimator} does not support --train.agent_func_path (multi-turn agents)")
    beta, cap = get("algo.mrtpo.beta", _settings.DEFAULT_BETA), get("algo.mrtpo.cap")
    for problem in (_settings.beta_problem(beta), _settings.cap_problem(cap)):  # the core's checks, flag-named
        if problem is not None:
            fail(f"--{MRTPO_PREFIX}{problem}")
    if get("algo.mrtpo.warmup_steps", 0) < 0:
        fail("--algo.mrtpo.warmup_steps must be >= 0")
    if get("algo.mrtpo.replay_micro_batch_size", 1) < 1 or get("algo.mrtpo.chunk_size", 1) < 1:
        fail("--algo.mrtpo.replay_micro_batch_size and --algo.mrtpo.chunk_size must be >= 1")
    if estimator == "gdpo" and get("algo.mrtpo.placement", _settings.DEFAULT_PLACEMENT) != _settings.DEFAULT_PLACEMENT:
        fail("--algo.mrtpo.placement applies to --algo.advantage.estimator mrtpo only")
    if estimator == "gdpo" and get("algo.mrtpo.relevance", _settings.DEFAULT_RELEVANCE) != _settings.DEFAULT_RELEVANCE:
        fail("--algo.mrtpo.relevance applies to --algo.advantage.estimator mrtpo only")
    return problems


def validate(flat: argparse.Namespace, error=None) -> None:
    """Reject combinations MRTPO/GDPO cannot run with: ``error(msg)`` for the first problem (argparse's
    ``parser.error``), or ValueError when ``error`` is None. The CLI's hook prints them all (``ParserHook``)."""
    problems = flag_problems(flat)
    if problems and error is not None:
        error(problems[0])
    if problems:
        raise ValueError(problems[0])


def given_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The ``--algo.mrtpo.*`` dests given on the command line of the last parse."""
    return {a.dest for a in parser._actions if isinstance(a, _StoreGiven) and a.given}  # noqa: SLF001


def ineffective_flags(estimator: str | None, given: set[str]) -> list[str]:
    """The given ``--algo.mrtpo.*`` flags (dests) that ``estimator`` does not read, sorted."""
    spec = _estimators.ADVANTAGE_ESTIMATORS.get(estimator)
    reads = spec.reads if spec is not None else frozenset()
    return sorted(d for d in given if d.startswith(MRTPO_PREFIX) and d[len(MRTPO_PREFIX) :] not in reads)


def warn_ineffective(estimator: str | None, given: set[str], stream=None) -> str | None:
    """Print one line naming the given flags that have no effect under ``estimator``; returns it (None: none)."""
    unused = ineffective_flags(estimator, given)
    if not unused:
        return None
    spec = _estimators.ADVANTAGE_ESTIMATORS.get(estimator)
    reads = (
        f"it reads only {', '.join('--' + MRTPO_PREFIX + r for r in sorted(spec.reads))}"
        if spec
        else "an upstream estimator reads no --algo.mrtpo.* flag"
    )
    line = (
        f"[mrtpo] warning: {', '.join('--' + d for d in unused)} "
        f"{'has' if len(unused) == 1 else 'have'} no effect under --algo.advantage.estimator {estimator} "
        f"({reads})"
    )
    print(line, file=stream or sys.stderr, flush=True)
    return line


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Make ``parser.error`` print ``<prog>: error: <message>`` alone, exit 2: upstream's usage text is ~170 lines,
    which buried the one line that matters (``--help`` still prints it)."""

    def error(message: str):
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    parser.error = error


class ParserHook:
    """Context manager: while active, upstream's parser gains our flags and validation.

    Patches ``ArgumentParser.parse_args`` so the hook applies to whichever parser holds
    ``--algo.advantage.estimator`` (upstream's, built inline under ``__main__``). On that parser every error is one
    line without the usage text, and every flag problem (``flag_problems``) gets its own line before exit 2.
    ``extend(parser)`` adds further flags (the pre-flight's); ``after(namespace)`` runs on the parsed, validated
    flags (the pre-flight, a device check).
    """

    def __init__(self, after=None, extend=None):
        self.after = after
        self.extend = extend

    def __enter__(self):
        self._original = argparse.ArgumentParser.parse_args
        original = self._original

        def parse_args(parser, args=None, namespace=None):
            hooked = extend_parser(parser)
            if hooked:
                one_line_errors(parser)
                if self.extend is not None:
                    self.extend(parser)
            for action in parser._actions:  # noqa: SLF001 - argparse has no API
                if isinstance(action, _StoreGiven):
                    action.given = False
            parsed = original(parser, args, namespace)
            if hooked:
                problems = flag_problems(parsed)
                for problem in problems:
                    print(f"{parser.prog}: error: {problem}", file=sys.stderr)
                if problems:
                    parser.exit(2)
                warn_ineffective(getattr(parsed, ESTIMATOR_DEST, None), given_flags(parser))
                if self.after is not None:
                    self.after(parsed)
            return parsed

        argparse.ArgumentParser.parse_args = parse_args
        return self

    def __exit__(self, *exc):
        argparse.ArgumentParser.parse_args = self._original
        return False
