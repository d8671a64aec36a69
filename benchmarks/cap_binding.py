"""How often the MRTPO cap binds, from real replay relevance (``python -m mrtpo_openrlhf.diagnose`` output).

    python -m mrtpo_openrlhf.diagnose --model smollm2 --data sql --out runs/diag-sql --limit 3 \
        --samples-per-prompt 4 --max-new-tokens 48
    python benchmarks/cap_binding.py runs/diag-sql/relevance.jsonl [more files] [--beta 0.5]

Each diagnose prompt's samples form one group. Advantages (``--advantages``): ``observed`` group-normalizes the
sampled rewards per reward (GDPO; a small model that fails every check gives no advantage at all); ``same-sign``
gives every reward with a block A = +1 (the most the cap can bind on these q profiles); ``random`` draws each
reward's A as +1 or -1 (20 draws). Every pair with a non-zero advantage gets its replayed q, and the placement
runs at ``beta`` with each candidate cap. Printed per file and cap: the share of valid response tokens where the
cap changes the advantage, the share of responses with at least one such token, and the share of all moved
(reallocated) credit the cap removes.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from mrtpo_openrlhf.core import group_normalize, token_advantages

CAPS = (1.0, 1.25, 1.5, 2.0, 3.0)


def load_groups(path: Path):
    """-> list of groups, each (rewards (n, K), q (n, K, T), mask (n, T)) over one prompt's samples."""
    by_response = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        by_response[(rec["prompt_index"], rec["response_index"])].append(rec)
    prompts = defaultdict(list)
    for (p, _), recs in sorted(by_response.items()):
        prompts[p].append(recs)
    groups = []
    for responses in prompts.values():
        if len(responses) < 2 or len({len(r) for r in responses}) != 1:
            continue
        K = len(responses[0])
        T = max(len(r[0]["tokens"]) for r in responses)
        rewards = torch.tensor([[float(x["value"]) for x in r] for r in responses])
        q = torch.zeros(len(responses), K, T)
        mask = torch.zeros(len(responses), T, dtype=torch.bool)
        for i, r in enumerate(responses):
            n = len(r[0]["tokens"])
            mask[i, :n] = True
            for k, x in enumerate(r):
                if x["q"] is not None:
                    q[i, k, :n] = torch.tensor(x["q"])
        groups.append((rewards, q, mask))
    return groups


def advantage_sets(groups, mode: str, draws: int = 20, seed: int = 0):
    """Yield (adv, q, mask) per group (and per draw for ``random``)."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(draws if mode == "random" else 1):
        for rewards, q, mask in groups:
            has_block = (q.abs().sum(-1) > 0).double()
            if mode == "observed":
                adv = group_normalize(rewards, rewards.shape[0])
            elif mode == "same-sign":
                adv = has_block
            else:
                adv = (torch.randint(0, 2, has_block.shape, generator=gen).double() * 2 - 1) * has_block
            yield adv, q, mask


def measure(groups, beta: float, caps=CAPS, mode: str = "observed") -> dict[float, dict[str, float]]:
    out = {}
    for cap in caps:
        tokens = binding_tokens = responses = binding_responses = 0
        received = removed = 0.0
        for adv, q, mask in advantage_sets(groups, mode):
            q = q * (adv != 0).unsqueeze(-1)  # the replay runs only pairs with a non-zero advantage
            free = token_advantages(adv, q, mask, beta, None)
            capped, binding = token_advantages(adv, q, mask, beta, cap, return_binding=True)
            uniform = adv.sum(-1, keepdim=True) * mask
            received += float((free - uniform).abs().sum())
            removed += float((free - capped).abs().sum())
            tokens += int(mask.sum())
            binding_tokens += int(binding.sum())
            responses += adv.shape[0]
            binding_responses += int(binding.any(-1).sum())
        out[cap] = {
            "token_frac": binding_tokens / max(tokens, 1),
            "response_frac": binding_responses / max(responses, 1),
            "moved_credit_removed": removed / max(received, 1e-12),
            "tokens": tokens,
            "responses": responses,
        }
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--beta", type=float, default=0.5)
    p.add_argument("--advantages", choices=["observed", "same-sign", "random"], default="observed")
    args = p.parse_args(argv)
    for path in args.files:
        groups = load_groups(path)
        print(f"{path}: {len(groups)} groups, beta={args.beta}, advantages={args.advantages}")
        for cap, m in measure(groups, args.beta, mode=args.advantages).items():
            print(
                f"  cap {cap:>4}: binds on {m['token_frac']:.4f} of {m['tokens']} tokens, "
                f"{m['response_frac']:.3f} of {m['responses']} responses; "
                f"removes {m['moved_credit_removed']:.4f} of the moved credit"
            )


if __name__ == "__main__":
    main()
