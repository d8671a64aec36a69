"""Parity of the harness's verdicts with the official scorers that can run on this machine (offline).

    python benchmarks/eval_parity.py [--bfcl-limit N]

1. IFBench: the official ``ifbench.evaluation_lib`` (installed package) on the package's own
   ``sample_output.jsonl`` responses. Its ``instructions`` module calls ``spacy.cli.download`` and
   ``nltk.download`` at import/run time; both are replaced by no-ops here (spaCy is only used for that download;
   the NLTK data it asks for is provided offline by scripts/env.sh where available).
2. BFCL: the official ``bfcl_eval.eval_checker.ast_eval.ast_checker`` imported alone, with its model-config
   import (which pulls every API SDK) replaced by a stub whose models never rewrite ``_`` to ``.``. Python
   categories only (the Java/JavaScript checkers take source-code strings, our layout takes JSON values).
   Predictions: each item's reference call, plus three perturbations (wrong name, a changed first argument,
   a dropped argument).
Prints the agreement rate and every disagreement. Nothing from these packages is copied into the repo.
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from importlib.resources import files
from pathlib import Path

from mrtpo_openrlhf.evaluation import Prediction, load_benchmark, score_examples
from mrtpo_openrlhf.evaluation.runner import EvalConfig
from mrtpo_openrlhf.verifiers.tool import ToolCall, reference_calls, render_calls


# ----------------------------------------------------------------------------------------------- IFBench
def _offline_ifbench():
    spacy = types.ModuleType("spacy")
    spacy_cli = types.ModuleType("spacy.cli")
    spacy_cli.download = lambda *a, **k: None
    spacy.cli = spacy_cli
    sys.modules.setdefault("spacy", spacy)
    sys.modules.setdefault("spacy.cli", spacy_cli)
    import nltk

    nltk.download = lambda *a, **k: True
    from ifbench import evaluation_lib

    return evaluation_lib


def ifbench_parity() -> tuple[int, int, list[str]]:
    lib = _offline_ifbench()
    data = Path(str(files("ifbench") / "data"))
    inputs = lib.read_prompt_list(str(data / "IFBench_test.jsonl"))
    prompt_to_response = lib.read_prompt_to_response_dict(str(data / "sample_output.jsonl"))
    examples = {ex.prompt: ex for ex in load_benchmark("ifbench")}
    ours = score_examples([examples[i.prompt] for i in inputs],
                          [Prediction(prompt_to_response[i.prompt]) for i in inputs], EvalConfig(["ifbench"], workers=1))
    agree, total, diffs = 0, 0, []
    skipped: dict[str, int] = {}
    for inp, rec in zip(inputs, ours):
        for mode, fn in (("strict", lib.test_instruction_following_strict), ("loose", lib.test_instruction_following_loose)):
            # One instruction at a time, so one official checker that cannot run offline skips only itself.
            for index, (iid, kwargs) in enumerate(zip(inp.instruction_id_list, inp.kwargs)):
                # the official loose pass sees the kwargs the strict pass already stripped of nulls (in place)
                given = dict(kwargs) if mode == "strict" else {k: v for k, v in kwargs.items() if v is not None}
                single = lib.InputExample(key=inp.key, instruction_id_list=[iid], prompt=inp.prompt, kwargs=[given])
                try:
                    official = fn(single, prompt_to_response).follow_instruction_list[0]
                except LookupError:  # NLTK data no package ships (the verifier marks these unsupported too)
                    skipped[iid] = skipped.get(iid, 0) + 1
                    continue
                ours_ok = rec[f"follow_instruction_list_{mode}"][index]
                total += 1
                agree += official == ours_ok
                if official != ours_ok:
                    diffs.append(f"ifbench {inp.key} {mode} {iid}: official {official}, ours {ours_ok}")
    for iid, n in sorted(skipped.items()):
        diffs.append(f"not compared: {iid} x{n} (the official checker needs NLTK data that is not available offline)")
    return agree, total, diffs


# ----------------------------------------------------------------------------------------------- BFCL
PY_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple",
                 "live_parallel", "live_parallel_multiple")


def _official_ast_checker():
    stub = types.ModuleType("bfcl_eval.constants.model_config")

    class _Config:
        underscore_to_dot = False

    class _Mapping(dict):
        def __missing__(self, key):
            return _Config()

    stub.MODEL_CONFIG_MAPPING = _Mapping()
    sys.modules["bfcl_eval.constants.model_config"] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, Language.PYTHON


def _variants(calls: list[ToolCall]) -> list[list[ToolCall]]:
    out = [calls]
    if calls:
        first = calls[0]
        out.append([ToolCall(first.name + "_v2", first.arguments)] + calls[1:])
        if first.arguments:
            key = next(iter(first.arguments))
            value = first.arguments[key]
            changed = {**first.arguments, key: (value + 1 if isinstance(value, int) and not isinstance(value, bool)
                                               else "zz_" + str(value))}
            out.append([ToolCall(first.name, changed)] + calls[1:])
            dropped = {k: v for k, v in first.arguments.items() if k != key}
            out.append([ToolCall(first.name, dropped)] + calls[1:])
    return out


def bfcl_parity(limit: int | None) -> tuple[int, int, list[str]]:
    ast_checker, python = _official_ast_checker()
    agree, total, diffs = 0, 0, []
    cfg = EvalConfig(["bfcl"], workers=1)
    for category in PY_CATEGORIES:
        items = load_benchmark("bfcl", bfcl_categories=(category,))[:limit]
        for ex in items:
            calls = reference_calls(ex.target["ground_truth"], ex.target["functions"])
            for k, variant in enumerate(_variants(calls)):
                ours = score_examples([ex], [Prediction("<think>x</think>" + render_calls(variant))], cfg)[0]
                model_output = [{c.name: c.arguments} for c in variant]
                official = ast_checker(ex.target["functions"], model_output, ex.target["ground_truth"], python,
                                       category, "stub-model")["valid"]
                total += 1
                agree += official == ours["verdict"]
                if official != ours["verdict"]:
                    diffs.append(f"bfcl {ex.id} variant {k}: official {official}, ours {ours['verdict']} "
                                 f"({ours['reason']}) calls={json.dumps(model_output)[:200]}")
    return agree, total, diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bfcl-limit", type=int, default=None, help="items per BFCL category (default all)")
    args = ap.parse_args()
    for name, (agree, total, diffs) in (("IFBench (sample_output.jsonl)", ifbench_parity()),
                                        ("BFCL AST (python categories)", bfcl_parity(args.bfcl_limit))):
        print(f"{name}: {agree}/{total} decisions agree ({100 * agree / max(total, 1):.2f}%)")
        for line in diffs[:40]:
            print("  " + line)
        if len(diffs) > 40:
            print(f"  ... {len(diffs) - 40} more")


if __name__ == "__main__":
    main()
