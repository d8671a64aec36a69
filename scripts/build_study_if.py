"""Build the study's instruction-following training set (bundled as mrtpo_openrlhf/data/instructions/study_*.jsonl).

Provenance: written by this script, nothing downloaded. Each prompt is a short writing task on a topic from the
list below plus IFEval constraints (Google's IFEval instruction ids and kwargs, Apache-2.0), each stated with the
checker's own description text, so the verifier block the replay removes is exactly a sentence of the prompt.
The set is chosen so that SmolLM2-135M-Instruct at T=0.7 passes each constraint sometimes, not always (see the
probe table in the study report): a reward that never varies in a group gives GDPO and MRTPO no signal.

    python scripts/build_study_if.py --layout fixed --out mrtpo_openrlhf/data/instructions/study_train.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from mrtpo_openrlhf.tasks.instruction.verifier import build_checker

TASKS = [
    "Write a short poem about {}.",
    "Write a short story about {}.",
    "Describe {} in a few sentences.",
    "Write a short product description for {}.",
    "Explain {} to a child.",
    "Write a short blog post about {}.",
    "Give three tips about {}.",
    "Write a short letter to a friend about {}.",
]
TOPICS = [
    "the ocean",
    "a rainy day",
    "coffee",
    "a lost cat",
    "the moon",
    "autumn leaves",
    "a bicycle",
    "friendship",
    "a city at night",
    "bread",
    "mountains",
    "a library",
    "the wind",
    "a garden",
    "snow",
    "a train journey",
    "music",
    "the sun",
    "a river",
    "an old clock",
    "birds",
    "a school day",
    "tea",
    "the forest",
    "a market",
    "stars",
    "a lighthouse",
    "summer",
    "a dog",
    "the desert",
    "a kite",
    "apples",
    "a bridge",
    "winter",
    "a museum",
    "the sea breeze",
    "a candle",
    "a farm",
    "chess",
    "a storm",
    "a picnic",
    "robots",
    "a volcano",
    "honey",
    "a sailboat",
    "the rainforest",
    "a piano",
    "fireflies",
    "a castle",
    "the park",
    "ice cream",
    "a thunderstorm",
    "a painter",
    "the stars at night",
    "a quiet morning",
    "the harvest",
    "a mountain lake",
    "an island",
    "the first day of spring",
    "a bakery",
    "a garden snail",
    "a waterfall",
    "a windmill",
    "a comet",
]
# Constraint pool: (IFEval instruction id, kwargs).
POOL = {
    "title": ("detectable_format:title", {}),
    "end_phrase": ("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"}),
    "lowercase": ("change_case:english_lowercase", {}),
    "no_comma": ("punctuation:no_comma", {}),
    "postscript": ("detectable_content:postscript", {"postscript_marker": "P.S."}),
    "short": ("length_constraints:number_words", {"num_words": 40, "relation": "less than"}),
    "quotation": ("startend:quotation", {}),
}
LAYOUTS = {
    # every prompt: the tag-like title constraint, then two from the pool (probe: which constraints vary)
    "probe": None,
    # every prompt the same three constraints, in this order: clean per-reward curves
    "fixed": ("title", "end_phrase", "no_comma"),
}


def build(n: int, layout: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pairs = [(t, x) for t in TASKS for x in TOPICS]
    rng.shuffle(pairs)
    rows = []
    for i, (task, topic) in enumerate(pairs[:n]):
        keys = LAYOUTS[layout] or ("title", *rng.sample([k for k in POOL if k != "title"], 2))
        ids = [POOL[k][0] for k in keys]
        kwargs = [dict(POOL[k][1]) for k in keys]
        sentences = [build_checker(i_, k_).description() for i_, k_ in zip(ids, kwargs)]
        prompt = " ".join([task.format(topic), *sentences])
        rows.append(
            {
                "prompt": prompt,
                "label": {"instruction_id_list": ids, "kwargs": kwargs},
                "source": f"study-{layout}",
                "key": f"study-{layout}-{i}",
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="fixed")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = build(args.n, args.layout, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
