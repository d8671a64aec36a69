"""Build the multi-constraint instruction-following study sets (issue 45): 3-8 constraints per prompt, one 0/1
reward each, bundled as mrtpo_openrlhf/data/instructions/multi/{train,heldout,probe}.jsonl + provenance.json.

Provenance: written by this script, nothing downloaded. A prompt is a short writing request (``SHORT_TASKS``) on a
topic of ``build_study_if.TOPICS`` followed by its constraints, each stated with its checker's own description
(Google's IFEval and AllenAI's IFBench instruction ids and wording), so the verifier block the replay removes is
exactly a sentence of the prompt. The rule, fixed before any probe of these sets:

- topics: the first 40 of ``TOPICS`` are training topics, the last 24 held-out topics (disjoint);
- per prompt, K constraints with K drawn uniformly from 3..8 (so about two prompts in three have 5 or more), drawn
  without replacement from the allowed types, never two that ``CONFLICTS`` marks as jointly unsatisfiable;
- types: ``POOL`` (the candidates). ``--layout probe`` draws from every candidate type on training topics, the
  probe that chooses the pool; ``--layout study`` writes the training pool, drawn from the types in neither
  ``--drop`` nor ``--unseen``, and the held-out set, drawn from every type not in ``--drop`` (so the types in
  ``--unseen`` appear in held-out prompts only);
- every checker's keyword arguments come from ``POOL``'s rule and the seeded generator; the topic's last word is
  the topic keyword (``keyword_freq`` and ``forbidden`` read it).

    python scripts/build_study_if_multi.py --layout probe --n 64 --out /tmp/if_multi_probe.jsonl
    python scripts/build_study_if_multi.py --layout study --unseen A B C --drop D --out-dir DIR
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable

from build_study_if import TOPICS

from mrtpo_openrlhf.tasks.instruction.verifier import build_checker

SHORT_TASKS = [
    "Write two sentences about {}.",
    "Describe {} in a short paragraph.",
    "Write a very short note about {}.",
    "Give a brief description of {}.",
    "Write a short message to a friend about {}.",
    "Explain {} in a few sentences.",
]
TRAIN_TOPICS, HELDOUT_TOPICS = TOPICS[:40], TOPICS[40:]
END_PHRASES = ["Is there anything else I can help with?", "Any other questions?", "Hope this helps"]
WORDS = ["light", "simple", "water", "quiet", "warm", "green", "small", "happy", "morning", "story"]
FIRST_WORDS = ["Today", "Imagine", "Here", "Remember"]


def _topic_word(topic: str) -> str:
    return topic.split()[-1]


# name -> (instruction id, kwargs rule(rng, topic)); the part of the response each checker reads is in the comment
POOL: dict[str, tuple[str, Callable[[random.Random, str], dict]]] = {
    "title": ("detectable_format:title", lambda r, t: {}),  # a <<title>> line, usually at the start
    "end_phrase": ("startend:end_checker", lambda r, t: {"end_phrase": r.choice(END_PHRASES)}),  # the end
    "no_comma": ("punctuation:no_comma", lambda r, t: {}),  # punctuation everywhere
    "lowercase": ("change_case:english_lowercase", lambda r, t: {}),  # case everywhere
    "postscript": ("detectable_content:postscript", lambda r, t: {"postscript_marker": "P.S."}),  # a final P.S.
    "quotation": ("startend:quotation", lambda r, t: {}),  # the first and last character
    "keywords": ("keywords:existence", lambda r, t: {"keywords": r.sample(WORDS, 2)}),  # two words anywhere
    "keyword_freq": (  # the topic word's count
        "keywords:frequency",
        lambda r, t: {"keyword": _topic_word(t), "frequency": 3, "relation": "at least"},
    ),
    "forbidden": ("keywords:forbidden_words", lambda r, t: {"forbidden_words": [_topic_word(t)]}),  # its absence
    "placeholder": ("detectable_content:number_placeholders", lambda r, t: {"num_placeholders": 1}),  # [x]
    "sections": (  # SECTION markers
        "detectable_format:multiple_sections",
        lambda r, t: {"section_spliter": "SECTION", "num_sections": 2},
    ),
    "highlight": ("detectable_format:number_highlighted_sections", lambda r, t: {"num_highlights": 2}),  # *x*
    "capitals": (  # words in capitals
        "change_case:capital_word_frequency",
        lambda r, t: {"capital_frequency": 2, "capital_relation": "at least"},
    ),
    "bullets": ("detectable_format:number_bullet_lists", lambda r, t: {"num_bullets": 3}),  # markdown bullets
    "first_word": (  # the first word of the first sentence
        "words:keywords_specific_position",
        lambda r, t: {"keyword": r.choice(FIRST_WORDS), "n": 1, "m": 1},
    ),
    "numbers": ("count:numbers", lambda r, t: {"N": 2}),  # digits
}
# pairs no response can satisfy together (case-sensitive SECTION markers and capitals against lowercase; the same
# topic word required and forbidden; a title or section marker before the required first word; section numbers
# counted as numbers)
CONFLICTS = {
    frozenset(p)
    for p in [
        ("lowercase", "capitals"),
        ("lowercase", "sections"),
        ("keyword_freq", "forbidden"),
        ("first_word", "title"),
        ("first_word", "sections"),
        ("first_word", "quotation"),
        ("numbers", "sections"),
    ]
}


def draw_constraints(rng: random.Random, types: list[str], k: int, tries: int = 100_000) -> list[str]:
    """k distinct types, no pair in CONFLICTS (redrawn until one fits)."""
    for _ in range(tries):
        keys = rng.sample(types, k)
        if not any(frozenset((a, b)) in CONFLICTS for i, a in enumerate(keys) for b in keys[i + 1 :]):
            return keys
    raise SystemExit(f"no {k} of {types} are free of CONFLICTS: allow more types or fewer constraints")


def build(layout: str, n: int, seed: int, unseen: list[str], drop: list[str] = ()) -> list[dict]:
    unknown = sorted((set(unseen) | set(drop)) - set(POOL))
    if unknown:
        raise SystemExit(f"unknown constraint types {unknown}; choose from {sorted(POOL)}")
    rng = random.Random(seed)
    topics = HELDOUT_TOPICS if layout == "heldout" else TRAIN_TOPICS
    types = sorted(set(POOL) - set(drop) - (set(unseen) if layout == "train" else set()))
    pairs = [(task, topic) for task in SHORT_TASKS for topic in topics]
    rng.shuffle(pairs)
    if n > len(pairs):
        raise SystemExit(f"--n {n}: only {len(pairs)} (task, topic) pairs for layout {layout}")
    rows = []
    for i, (task, topic) in enumerate(pairs[:n]):
        keys = draw_constraints(rng, types, rng.randint(3, 8))
        ids = [POOL[k][0] for k in keys]
        kwargs = [POOL[k][1](rng, topic) for k in keys]
        sentences = [build_checker(i_, k_).description() for i_, k_ in zip(ids, kwargs)]
        rows.append(
            {
                "prompt": " ".join([task.format(topic), *sentences]),
                "label": {"instruction_id_list": ids, "kwargs": kwargs},
                "types": keys,
                "unseen": sorted(set(keys) & set(unseen)) if layout == "heldout" else [],
                "source": f"if-multi-{layout}",
                "key": f"if-multi-{layout}-{i}",
            }
        )
    return rows


def _write(rows: list[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ks = [len(r["types"]) for r in rows]
    print(f"{len(rows)} rows -> {out}; K {min(ks)}-{max(ks)}, {sum(k >= 5 for k in ks)} with 5 or more")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layout", choices=["probe", "study"], required=True)
    ap.add_argument("--n", type=int, default=64, help="probe: prompts")
    ap.add_argument("--train", type=int, default=240, help="study: training pool size")
    ap.add_argument("--heldout", type=int, default=144, help="study: held-out prompts")
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--unseen", nargs="*", default=[], help="study: types that appear in held-out prompts only")
    ap.add_argument("--drop", nargs="*", default=[], help="study: candidate types left out of both sets")
    ap.add_argument("--out", type=Path, help="probe: the JSONL file")
    ap.add_argument("--out-dir", type=Path, help="study: folder for train.jsonl, heldout.jsonl, provenance.json")
    args = ap.parse_args()
    if args.layout == "probe":
        if not args.out:
            ap.error("--layout probe needs --out")
        _write(build("probe", args.n, args.seed, []), args.out)
        return
    if not args.out_dir:
        ap.error("--layout study needs --out-dir")
    train = build("train", args.train, args.seed, args.unseen, args.drop)
    heldout = build("heldout", args.heldout, args.seed + 1, args.unseen, args.drop)
    _write(train, args.out_dir / "train.jsonl")
    _write(heldout, args.out_dir / "heldout.jsonl")
    provenance = {
        "source": "scripts/build_study_if_multi.py (rule in its docstring); checkers: IFEval and IFBench ids",
        "command": "python scripts/build_study_if_multi.py --layout study --out-dir "
        f"{args.out_dir} --train {args.train} --heldout {args.heldout} --seed {args.seed} "
        f"--unseen {' '.join(args.unseen)} --drop {' '.join(args.drop)}",
        "seed": args.seed,
        "train_topics": TRAIN_TOPICS,
        "heldout_topics": HELDOUT_TOPICS,
        "tasks": SHORT_TASKS,
        "types": {name: instruction_id for name, (instruction_id, _) in POOL.items()},
        "unseen_types": sorted(args.unseen),
        "dropped_types": sorted(args.drop),
        "conflicts": sorted(sorted(pair) for pair in CONFLICTS),
        "train_rows": len(train),
        "heldout_rows": len(heldout),
        "heldout_rows_with_unseen": sum(bool(r["unseen"]) for r in heldout),
    }
    (args.out_dir / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
