"""The training run's own page: where each reward's credit went, for a few responses the run replayed.

The experience maker keeps, at each step that replayed, its first ``KEEP_ROWS`` replayed responses (``RunSamples``,
one call after q and the token advantages exist: nothing is replayed again) and writes them to
``replayed_samples.jsonl`` beside ``$MRTPO_METRICS_JSONL``; the file holds the newest such step. ``render`` turns it
into ``credit.html``: per response, each reward's q heatmap and the token advantage that reward placed (its GDPO
advantage A_k spread by the step's placement, ``core.weights.token_advantages`` on that reward alone), then the token
advantages the loss got (all rewards, after GDPO's batch step, the length penalty and the clip).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import torch

from ..metrics import ENV_VAR as METRICS_ENV
from ..paths import display_path

logger = logging.getLogger(__name__)

SAMPLES_FILE = "replayed_samples.jsonl"
PAGE_FILE = "credit.html"
KEEP_ROWS = 4  # responses kept from a step (the page is read, not aggregated)


def _r(values: torch.Tensor) -> list:
    return [round(float(v), 5) for v in values.flatten()] if values.dim() <= 1 else [_r(v) for v in values]


class RunSamples:
    """A step's kept rows; ``samples_path()`` None (no metrics file) keeps nothing."""

    def __init__(self, path: Path | None, tokenizer: Any, step: int, measure: str | None = None):
        self.path, self.tokenizer, self.step, self.measure = path, tokenizer, step, measure
        self.rows: list[dict] = []

    @classmethod
    def from_env(cls, tokenizer: Any, step: int, measure: str | None = None) -> "RunSamples | None":
        metrics = os.environ.get(METRICS_ENV)
        return cls(Path(metrics).with_name(SAMPLES_FILE), tokenizer, step, measure) if metrics else None

    def keep(self, e, q: torch.Tensor, advantages: torch.Tensor, response, batch, placement) -> None:
        """Rows of experience ``e`` that were replayed: q (B, K, T) and the loss's advantages (B, T) on the
        action mask's positions. The mask covers a sequence's last T positions (upstream 0.11.2 takes the last
        ``action_mask.shape[1]`` log-probs). A view of training: a failure here is logged, never raised."""
        try:
            self._keep(e, q, advantages, response, batch, placement)
        except Exception as exc:  # noqa: BLE001 - the page must never stop a run
            logger.warning("[mrtpo] credit page: rows not kept at step %d: %s", self.step, exc)
            self.path = None

    def _keep(self, e, q, advantages, response, batch, placement) -> None:
        mask = e.action_mask.bool()
        for j, g in enumerate(e.index):
            if len(self.rows) >= KEEP_ROWS:
                return
            if not bool(q[j].any()):
                continue
            ids = e.sequences[j][e.sequences.shape[1] - mask.shape[1] :][mask[j]].tolist()
            self.rows.append(
                {
                    "step": self.step,
                    "row": int(g),
                    "measure": self.measure,
                    "mode": placement.mode,
                    "beta": placement.beta,
                    "tokens": [self.tokenizer.decode([i]) for i in ids],
                    "names": list(batch.names[g]),
                    "values": _r(batch.values[g]),
                    "group_advantages": _r(response.group[g]),
                    "q": _r(q[j][:, mask[j]]),
                    "advantages": _r(advantages[j][mask[j]]),
                }
            )

    def write(self) -> None:
        """Replace the file with this step's rows (a step without replayed rows leaves the last one)."""
        if self.path is None or not self.rows:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.rows), encoding="utf-8")
        os.replace(tmp, self.path)


def reward_token_advantages(row: Mapping[str, Any]) -> list[list[float]]:
    """(K, L) each reward's own placed advantage: ``token_advantages`` of that reward alone (uncapped)."""
    from ..core.weights import token_advantages

    q = torch.tensor(row["q"], dtype=torch.float32)  # (K, L)
    adv = torch.tensor(row["group_advantages"], dtype=torch.float32)
    mask = torch.ones(1, q.shape[1], dtype=torch.bool)
    out = []
    for k in range(q.shape[0]):
        placed = token_advantages(
            adv[None, k : k + 1], q[None, k : k + 1], mask, row["beta"], None, row["mode"], None, torch.Generator()
        )
        out.append(placed[0].tolist())
    return out


def read_samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def render(samples: Path, out: Path, run_info: Mapping[str, Any] | None = None) -> Path:
    """``credit.html`` from a run's ``replayed_samples.jsonl``."""
    from .html import run_credit_page

    rows = read_samples(samples)
    for row in rows:
        row["reward_advantages"] = reward_token_advantages(row)
    info = {"samples": display_path(samples), **(run_info or {})}
    out.write_text(run_credit_page(rows, info), encoding="utf-8")
    return out


def samples_in(folder: Path) -> Path | None:
    path = Path(folder) / SAMPLES_FILE
    return path if path.is_file() else None
