"""The training pre-flight: data, labels, reward and flags checked in seconds, before ``ray.init`` starts anything.

``python -m mrtpo_openrlhf.cli.train_ppo_ray`` runs ``run(flags)`` on the parsed flags (the flat, dotted namespace
of upstream's parser) before upstream's ``train()``; ``--preflight-only`` stops after it (exit 0 when fine). Checked:

- the prompt dataset (``--data.prompt_dataset``, and ``--eval.dataset``): every JSONL line parses
  (``data.jsonl.iter_jsonl``, ``file:line`` errors), the file is not empty, every row has ``--data.input_key``
  (a string, or with ``--data.apply_chat_template`` a list of chat messages) and ``--data.label_key``, and there are
  at least ``--rollout.batch_size`` prompts after ``--data.max_samples``. JSON lists, CSV, Parquet and folders saved
  with ``datasets.save_to_disk`` are read the same way; for a Hugging Face hub name only what its metadata says
  (columns, split sizes) is checked, nothing is downloaded. With the chat template, a local model folder must have one;
- the labels, when the reward belongs to a registered task (``tasks.task_of_reward``): each is opened by the task's
  own ``label_parser`` (the function its scorer calls); the first bad rows are named with the count. A label under
  which some reward can never be earned (the task's ``unearnable``: a missing database, a constraint that cannot be
  checked) stops the run unless ``--preflight-allow-unearnable``;
- the reward: a ``--reward.remote_url`` file imports and defines ``reward_func``, a URL answers ``/health``; one call
  on the first row (the task's reference answer, if it has one) returns one reward, one score and numeric logs
  (``rewards.contract``; the MRTPO reward vector when present).

Each problem is one line ``preflight: <file:line or flag>: <what>`` on stderr, then exit 2. The MRTPO flags are
checked by the parser hook (``adapter.args.flag_problems``), one line each, before this runs.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..data.jsonl import DatasetError, iter_jsonl_numbered

PREFIX = "preflight"
ONLY_DEST, SKIP_DEST, ALLOW_UNEARNABLE_DEST = "preflight_only", "preflight_skip", "preflight_allow_unearnable"
FIRST_N = 3  # rows named per problem
HTTP_TIMEOUT_S = 10.0
LOCAL_EXTS = (".jsonl", ".json", ".csv", ".parquet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The pre-flight's flags on upstream's parser (idempotent: the hook calls it on every parse)."""
    if any(a.dest == ONLY_DEST for a in parser._actions):  # noqa: SLF001 - argparse has no API
        return
    g = parser.add_argument_group("pre-flight check (mrtpo-openrlhf; runs before Ray starts)")
    g.add_argument("--preflight-only", dest=ONLY_DEST, action="store_true", help="run only the check: exit 0 or 2")
    g.add_argument("--preflight-skip", dest=SKIP_DEST, action="store_true", help="start without the check")
    g.add_argument(
        "--preflight-allow-unearnable",
        dest=ALLOW_UNEARNABLE_DEST,
        action="store_true",
        help="train even where a label makes a reward impossible to earn (e.g. its database is missing)",
    )


@dataclass
class Row:
    where: str  # "file:line", "file: item i" or "file: row i"
    values: dict[str, Any]  # the row's input and label values (absent keys absent)


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(text)


def _first(wheres: list[str]) -> str:
    more = "" if len(wheres) <= FIRST_N else ", ..."
    return ", ".join(wheres[:FIRST_N]) + more


def _short(text: Any, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------- the data
def _json_rows(path: Path, keys: tuple[str, ...]) -> Iterator[Row]:
    """A ``.json`` file as the datasets JSON loader reads it: one JSON list of objects, else JSON lines."""
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if path.suffix.lower() == ".json" and head.startswith(b"["):
        try:
            items = json.loads(path.read_text(encoding="utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise DatasetError(f"{path}{line}: invalid JSON ({getattr(exc, 'msg', exc)})") from None
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise DatasetError(f"{path}: item {i}: expected a JSON object, got {type(item).__name__}")
            yield Row(f"{path}: item {i}", {k: item[k] for k in keys if k in item})
        return
    for lineno, row in iter_jsonl_numbered(path):
        yield Row(f"{path}:{lineno}", {k: row[k] for k in keys if k in row})


def _csv_rows(path: Path, keys: tuple[str, ...]) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            yield Row(f"{path}:{reader.line_num}", {k: row[k] for k in keys if row.get(k) is not None})


def _table_rows(where: str, columns: list[str], table: dict[str, list], n: int, keys: tuple[str, ...]) -> Iterator[Row]:
    present = [k for k in keys if k in columns]
    for i in range(n):
        yield Row(f"{where}: row {i}", {k: table[k][i] for k in present})


def _parquet_rows(path: Path, keys: tuple[str, ...]) -> Iterator[Row]:
    import pyarrow.parquet as pq

    names = pq.ParquetFile(path).schema_arrow.names
    table = pq.read_table(path, columns=[k for k in keys if k in names]).to_pydict()
    yield from _table_rows(str(path), names, table, pq.ParquetFile(path).metadata.num_rows, keys)


def _saved_dataset_rows(folder: Path, split: str, keys: tuple[str, ...]) -> Iterator[Row]:
    """A folder written by ``datasets.save_to_disk`` (memory-mapped: nothing is copied)."""
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(str(folder))
    where = str(folder)
    if isinstance(data, DatasetDict):
        if split not in data:
            raise DatasetError(f"{folder}: no split {split!r} (has {', '.join(data)}; --data.prompt_split)")
        data, where = data[split], f"{folder}[{split}]"
    table = {k: data[k] for k in keys if k in data.column_names}
    yield from _table_rows(where, data.column_names, table, len(data), keys)


def _is_saved_dataset(folder: Path) -> bool:
    return any((folder / name).is_file() for name in ("dataset_dict.json", "state.json"))


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in LOCAL_EXTS)


def _rows_of_file(path: Path, keys: tuple[str, ...]) -> Iterator[Row]:
    ext = path.suffix.lower()
    if ext in (".jsonl", ".json"):
        return _json_rows(path, keys)
    if ext == ".csv":
        return _csv_rows(path, keys)
    return _parquet_rows(path, keys)


def _hub_metadata(name: str, data_dir: str | None, split: str, flag: str, keys: dict[str, str], report: Report):
    """What a hub dataset's metadata says, without downloading its data (None where unknown)."""
    try:
        from datasets import load_dataset_builder

        info = load_dataset_builder(name, data_dir=data_dir).info
    except Exception as exc:  # noqa: BLE001 - offline, unknown name, no access: all end the run the same way
        report.problem(f"{flag} {name}: not a local file or folder, and not loadable from the hub: {_short(exc)}")
        return None
    if info.features is not None:
        for key_flag, key in keys.items():
            if key not in info.features:
                report.problem(f"{flag} {name}: no column {key!r} ({key_flag}); it has {', '.join(info.features)}")
    if info.splits and split not in info.splits:
        report.problem(f"{flag} {name}: no split {split!r}; it has {', '.join(info.splits)}")
        return None
    report.notes.append(f"{flag} {name}: a hub dataset: its rows and labels are not checked (nothing is downloaded)")
    return info.splits[split].num_examples if info.splits else None


def read_dataset(
    spec: str, split: str, flag: str, keys: dict[str, str], report: Report
) -> tuple[list[Row], int | None]:
    """The rows of one ``--data.prompt_dataset`` entry (``path`` or ``path@data_dir``, as upstream splits it) and how
    many prompts it holds (None: unknown, e.g. a loading script or an unreadable file; a hub dataset gives a count
    but no rows)."""
    path_text, _, data_dir = (part.strip() for part in spec.partition("@"))
    path = Path(path_text)
    wanted = tuple(dict.fromkeys(keys.values()))
    if path.suffix == ".py" or (path.is_dir() and (path / f"{path.name}.py").exists()):
        report.notes.append(f"{flag} {path}: a loading script: not checked")
        return [], None
    if not path.exists():
        if path.suffix.lower() in LOCAL_EXTS + (".arrow",) or path_text.startswith(("/", ".")):
            report.problem(f"{flag} {path_text}: no such file or folder")
            return [], 0
        return [], _hub_metadata(path_text, data_dir or None, split, flag, keys, report)
    if path.suffix.lower() == ".arrow":
        report.notes.append(f"{flag} {path}: an Arrow file: not checked")
        return [], None
    rows: list[Row] = []
    try:
        if path.is_dir() and _is_saved_dataset(path):
            rows = list(_saved_dataset_rows(path, split, wanted))
            return rows, len(rows)
        files = _local_files(path / data_dir if data_dir and path.is_dir() else path)
        if not files:
            report.problem(f"{flag} {path}: a folder without data files ({', '.join(LOCAL_EXTS)})")
        for file in files:
            before = len(rows)
            rows.extend(_rows_of_file(file, wanted))
            if len(rows) == before:
                report.problem(f"{file}: no rows (the file is empty)")
    except DatasetError as exc:  # the loader would stop here too: what came before it proves nothing more
        report.problem(str(exc))
        return [], None
    except (OSError, ValueError, csv.Error) as exc:
        report.problem(f"{path}: cannot be read: {_short(exc)}")
        return [], None
    return rows, len(rows)


def _input_problem(value: Any, chat: bool) -> str:
    """What is wrong with a row's input for upstream's ``preprocess_data`` ("" when nothing)."""
    if isinstance(value, str):
        return "is empty" if not value.strip() else ""
    if chat:
        if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
            return ""
        return f"is {type(value).__name__}, not a string or a list of chat messages ({{'role', 'content'}})"
    if isinstance(value, list):
        return "is a list: chat messages need --data.apply_chat_template"
    return f"is {type(value).__name__}, not a string"


def check_rows(rows: list[Row], flags: argparse.Namespace, label_key: str | None, report: Report) -> None:
    """Every row has the input (of a usable type) and the label key."""
    input_key = getattr(flags, "data.input_key", "input")
    chat = getattr(flags, "data.apply_chat_template", False)
    missing: dict[tuple[str, str], list[str]] = {}  # (key, its flag) -> rows without it
    bad_input: list[tuple[str, str]] = []
    for row in rows:
        for key, flag in ((input_key, "--data.input_key"), (label_key, "--data.label_key")):
            if key is not None and key not in row.values:
                missing.setdefault((key, flag), []).append(row.where)
        why = _input_problem(row.values[input_key], chat) if input_key in row.values else ""
        if why:
            bad_input.append((row.where, why))
    for (key, flag), wheres in missing.items():
        report.problem(
            f"{wheres[0]}: no {key!r} key ({flag} {key}); {len(wheres)} of {len(rows)} rows lack it "
            f"(first at {_first(wheres)})"
        )
    if bad_input:
        where, why = bad_input[0]
        report.problem(
            f"{where}: {input_key!r} {why}; {len(bad_input)} of {len(rows)} rows are like it "
            f"(first at {_first([w for w, _ in bad_input])})"
        )


def check_batch(n_rows: int, sources: str, flags: argparse.Namespace, report: Report) -> None:
    max_samples = getattr(flags, "data.max_samples", None) or n_rows
    used = min(n_rows, max_samples)
    need = getattr(flags, "rollout.batch_size", 1) or 1
    if 0 < used < need:
        cut = f" (--data.max_samples {max_samples})" if max_samples < n_rows else ""
        report.problem(
            f"--rollout.batch_size {need}: one rollout batch needs {need} prompts; {sources} has {used}{cut}"
        )


# -------------------------------------------------------------------------------------------------- the labels
def check_labels(rows: list[Row], label_key: str, task, flags: argparse.Namespace, report: Report) -> None:
    """Each label through the task's own parser, then its ``unearnable`` rewards."""
    try:
        parse, unearnable = task.function("label_parser"), task.function("unearnable")
    except AttributeError as exc:  # a task registered without them
        report.notes.append(f"labels not checked: {exc}")
        return
    bad: list[tuple[str, str]] = []
    dead: list[tuple[str, list[tuple[str, str]]]] = []
    checked = 0
    for row in rows:
        if label_key not in row.values:
            continue  # named by check_rows
        checked += 1
        label = row.values[label_key]
        try:
            parse(label)
            found = unearnable(label) if unearnable is not None else []
        except (ValueError, TypeError, KeyError) as exc:
            bad.append((row.where, _short(exc)))
            continue
        if found:
            dead.append((row.where, found))
    parser_name = f"{task.reward_module}.{task.label_parser}"
    if bad:
        where, why = bad[0]
        report.problem(
            f"{where}: bad label ({why}); {len(bad)} of {checked} labels fail {parser_name} "
            f"(first at {_first([w for w, _ in bad])}); the reward would score them 0"
        )
    if dead:
        where, found = dead[0]
        names = ", ".join(repr(name) for name, _ in found)
        text = (
            f"{where}: no response can earn reward {names} ({_short(found[0][1])}); {len(dead)} of {checked} "
            f"labels are like it (first at {_first([w for w, _ in dead])})"
        )
        if getattr(flags, ALLOW_UNEARNABLE_DEST, False):
            report.notes.append(text + " (accepted: --preflight-allow-unearnable)")
        else:
            report.problem(text + "; pass --preflight-allow-unearnable to train anyway")
    if checked and not bad:
        report.facts.append(f"{checked} labels parsed by {parser_name}")


# -------------------------------------------------------------------------------------------------- the reward
def _where_in(exc: BaseException, path: Path) -> str:
    """``file:line`` of the innermost frame in ``path`` (else the innermost frame) of ``exc``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    frame = (inside or frames or [None])[-1]
    return f"{frame.filename}:{frame.lineno}" if frame else str(path)


def load_reward_file(path: Path, report: Report):
    """Import ``path`` the way upstream's ``SingleTurnAgentExecutor`` does; its ``reward_func`` or None."""
    flag = f"--reward.remote_url {path}"
    if not path.is_file():
        report.problem(f"{flag}: no such file")
        return None
    try:
        spec = importlib.util.spec_from_file_location("reward_func", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the file raises, the trainer would die of it too
        report.problem(f"{_where_in(exc, path)}: importing {flag} failed: {type(exc).__name__}: {_short(exc)}")
        return None
    func = getattr(module, "reward_func", None)
    if not callable(func):
        report.problem(f"{flag}: defines no reward_func(queries, prompts, labels)")
        return None
    return func


def _http_json(url: str, payload: dict | None = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:  # noqa: S310 - the user's own URL
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:  # the server's reason (e.g. a 500 "reward setup error: ..."), not just 500
        try:
            reason = json.loads(exc.read().decode("utf-8")).get("error")
        except (ValueError, AttributeError, OSError):
            reason = None
        raise ValueError(f"HTTP {exc.code}: {reason or exc.reason}") from None


def _poster(url: str):
    """One call to a reward server, as upstream's HTTP client sends it."""
    return lambda query, prompt, label: _http_json(url, {"query": [query], "prompts": [prompt], "labels": [label]})


def reward_health(url: str, report: Report) -> dict | None:
    parts = urllib.parse.urlsplit(url)
    health = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/health", "", ""))
    try:
        answer = _http_json(health)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        report.problem(f"--reward.remote_url {url}: {health} did not answer: {_short(getattr(exc, 'reason', exc))}")
        return None
    return answer if isinstance(answer, dict) else {}


def check_reward_output(out: Any, origin: str, multi_reward: bool, report: Report) -> str:
    """The documented shape (rewards/contract.py): one reward, one score, numeric logs (+ the reward vector).
    Returns a short description of what it answered ("" when the shape is wrong)."""
    from ..adapter.transport import scalar, split_extra_logs
    from ..rewards.contract import parse_extra_logs

    if not isinstance(out, dict) or "rewards" not in out:
        report.problem(f"{origin}: returned {type(out).__name__}, not a dict with 'rewards', 'scores', 'extra_logs'")
        return ""
    try:
        reward = scalar(out["rewards"])
        if out.get("scores") is not None:
            scalar(out["scores"])
        logs = out.get("extra_logs") or {}
        if not isinstance(logs, dict):
            raise ValueError(f"extra_logs is {type(logs).__name__}, not a dict")
        numeric, ours = split_extra_logs(logs)
        for key, value in numeric.items():
            try:
                scalar(value)
            except (TypeError, ValueError):
                raise ValueError(f"extra_logs[{key!r}] is {_short(value, 60)!r}, not a number") from None
        vector = parse_extra_logs(ours) if ours else None
    except (TypeError, ValueError) as exc:
        report.problem(f"{origin}: answer has the wrong shape: {_short(exc)}")
        return ""
    if vector is None:
        if multi_reward:
            report.notes.append(f"{origin}: no named rewards (extra_logs has no mrtpo_reward_names): one reward")
        return f"reward {reward:g}"
    values = ", ".join(f"{name}={value:g}" for name, value in zip(vector.names, vector.values))
    return f"{len(vector.items)} rewards ({values})"


def check_reward(flags: argparse.Namespace, first: Row | None, input_key: str, label_key: str | None, report: Report):
    """The reward endpoint, one call on ``first``; returns the task it belongs to (None: not a registered one)."""
    from ..adapter.args import MULTI_REWARD_ESTIMATORS
    from ..tasks import TASKS, task_of_reward

    remote = getattr(flags, "reward.remote_url", None)
    if not remote:
        report.notes.append("no --reward.remote_url: the reward model is not checked")
        return None
    endpoints = [u.strip() for u in remote.split(",") if u.strip()]
    multi = getattr(flags, "algo.advantage.estimator", None) in MULTI_REWARD_ESTIMATORS
    task, calls, path = None, [], None
    if endpoints[0].endswith(".py"):  # upstream loads only the first entry, as a file
        path = Path(endpoints[0])
        func = load_reward_file(path, report)
        if func is None:
            return None
        task = task_of_reward(path, func)
        calls.append((f"--reward.remote_url {path}: reward_func", lambda q, p, lab: func([q], [p], [lab])))
    else:
        for url in endpoints:
            health = reward_health(url, report)
            if health is None:
                continue
            task = task or TASKS.get(str(health.get("task")))
            calls.append((f"--reward.remote_url {url}", _poster(url)))
    if first is None or not calls:
        return task
    prompt = first.values.get(input_key, "")
    if isinstance(prompt, list):  # chat messages: their text (upstream would apply the template first)
        prompt = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    prompt = prompt if isinstance(prompt, str) else ""
    label = first.values.get(label_key, "") if label_key else ""
    response = ""
    if task is not None and task.example_responses is not None:
        try:
            response = task.function("example_responses")({input_key: prompt, "prompt": prompt, "label": label})[0]
        except Exception:  # noqa: BLE001 - a bad label is reported by check_labels; call with an empty response
            response = ""
    for origin, call in calls:
        t0 = time.perf_counter()
        try:
            out = call(prompt + response, prompt, label)
        except Exception as exc:  # noqa: BLE001 - the trainer would die of the same call
            where = f"{_where_in(exc, path)}: " if path is not None else ""  # a file: the line that raised
            report.problem(
                f"{where}{origin} raised on the first row ({first.where}): {type(exc).__name__}: {_short(exc)}"
            )
            continue
        answered = check_reward_output(out, f"{origin} on the first row ({first.where})", multi, report)
        if answered:
            report.facts.append(f"{origin.split(': ')[0]} answered {answered} in {time.perf_counter() - t0:.2f}s")
    return task


# --------------------------------------------------------------------------------------------------- the model
def check_chat_template(flags: argparse.Namespace, report: Report) -> None:
    """With ``--data.apply_chat_template``, a local model folder's tokenizer must have a template."""
    model = getattr(flags, "actor.model_name_or_path", None)
    folder = Path(model) if model else None
    if not getattr(flags, "data.apply_chat_template", False) or folder is None or not folder.is_dir():
        return
    config = folder / "tokenizer_config.json"
    if not config.is_file() or any((folder / n).is_file() for n in ("chat_template.jinja", "chat_template.json")):
        return
    try:
        has = bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError):
        return
    if not has:
        report.problem(f"--data.apply_chat_template: the tokenizer in {folder} has no chat template ({config})")


# ----------------------------------------------------------------------------------------------- the attention
ATTN_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def _where_actors_run() -> str:
    """``here`` (CUDA on this machine, no cluster address), ``cluster`` (RAY_ADDRESS: other nodes) or ``nowhere``
    (no CUDA, or the CPU layer: the device check or sdpa decide). Ray itself is not imported (the pre-flight is
    fast because it imports none of Ray, DeepSpeed and vLLM)."""
    import os

    import torch

    from ..env_flags import cpu_layer_on

    if cpu_layer_on():
        return "nowhere"
    if os.environ.get("RAY_ADDRESS"):
        return "cluster"
    return "here" if torch.cuda.is_available() else "nowhere"


def check_attention(flags: argparse.Namespace, report: Report) -> None:
    """``--ds.attn_implementation`` (upstream's default: flash_attention_2) must import where the actors run: a
    missing or broken flash-attn otherwise fails every actor at import, minutes in. Checked here when this machine
    is where they run (CUDA here, no cluster to join); a cluster's nodes are the doctor's (``RAY_ADDRESS``). Without
    CUDA the CLI stops at its device check instead, naming what is missing."""
    attn = getattr(flags, "ds.attn_implementation", None)
    module = ATTN_MODULES.get(attn or "")
    if module is None:
        return
    where = _where_actors_run()
    if where != "here":
        if where == "cluster":
            report.notes.append(
                f"--ds.attn_implementation {attn}: {module} is imported on the workers; "
                "`python -m mrtpo_openrlhf.cli.doctor` with RAY_ADDRESS checks every GPU node"
            )
        return
    from .doctor import import_version

    version, why = import_version(module)
    if version is None:
        report.problem(
            f"--ds.attn_implementation {attn}: {module} cannot be imported ({why}): install flash-attn 2.8.3 "
            "(scripts/install_gpu.sh, docs/gpu.md), or choose --ds.attn_implementation sdpa (ATTN_IMPL=sdpa)"
        )
    else:
        report.facts.append(f"{module} {version}")


# ------------------------------------------------------------------------------------------------------- run
def check(flags: argparse.Namespace) -> Report:
    """Every check on the parsed, flat flags; the report's problems are the lines that stop the run."""
    report = Report()
    check_attention(flags, report)
    input_key = getattr(flags, "data.input_key", "input")
    label_key = getattr(flags, "data.label_key", None)
    keys = {"--data.input_key": input_key} | ({"--data.label_key": label_key} if label_key else {})
    check_chat_template(flags, report)
    datasets_flag = getattr(flags, "data.prompt_dataset", None)
    rows: list[Row] = []
    if not datasets_flag:
        report.problem("--data.prompt_dataset is not set (a JSONL file, a folder or a hub dataset name)")
    else:
        specs = [s.strip() for s in datasets_flag.split(",") if s.strip()]
        probs = getattr(flags, "data.prompt_probs", None)
        if probs and len(probs.split(",")) != len(specs):
            report.problem(f"--data.prompt_probs has {len(probs.split(','))} values for {len(specs)} datasets")
        split = getattr(flags, "data.prompt_split", "train")
        counts = []
        for spec in specs:
            got, count = read_dataset(spec, split, "--data.prompt_dataset", keys, report)
            rows.extend(got)
            counts.append(count)
        check_rows(rows, flags, label_key, report)
        if None not in counts:
            check_batch(sum(counts), datasets_flag, flags, report)
        if rows:
            report.facts.append(f"{len(rows)} prompts in {datasets_flag}")
    eval_flag = getattr(flags, "eval.dataset", None)
    eval_rows: list[Row] = []
    for spec in [s.strip() for s in (eval_flag or "").split(",") if s.strip()]:
        eval_rows += read_dataset(spec, getattr(flags, "eval.split", "train"), "--eval.dataset", keys, report)[0]
    check_rows(eval_rows, flags, label_key, report)
    task = check_reward(flags, rows[0] if rows else None, input_key, label_key, report)
    if task is not None:
        if not label_key:
            report.problem(
                f"--data.label_key is not set: every label reaches the {task.name} reward as '' and scores 0 "
                "(the bundled sets use --data.label_key label)"
            )
        else:
            check_labels(rows + eval_rows, label_key, task, flags, report)
    elif getattr(flags, "reward.remote_url", None):
        report.notes.append("labels not checked: the reward is not a registered task's (mrtpo_openrlhf/tasks/)")
    return report


def run(flags: argparse.Namespace, stream=None) -> None:
    """The CLI's step before ``ray.init``: print each problem on one line and exit 2; with ``--preflight-only``
    exit 0 when fine. Checks nothing with ``--preflight-skip`` (with ``--preflight-only`` too: then it only exits 0).
    """
    stream = stream or sys.stderr
    if getattr(flags, SKIP_DEST, False):
        print(f"{PREFIX}: skipped (--preflight-skip)", file=stream, flush=True)
        if getattr(flags, ONLY_DEST, False):
            sys.exit(0)
        return
    t0 = time.perf_counter()
    report = check(flags)
    for problem in report.problems:
        print(f"{PREFIX}: {problem}", file=stream, flush=True)
    if report.problems:
        sys.exit(2)
    for note in report.notes:
        print(f"{PREFIX}: note: {note}", file=stream, flush=True)
    print(f"{PREFIX}: ok in {time.perf_counter() - t0:.2f}s: {'; '.join(report.facts)}", file=stream, flush=True)
    if getattr(flags, ONLY_DEST, False):
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    """``python -m mrtpo_openrlhf.cli.preflight <training flags>``: the training CLI's ``--preflight-only``."""
    from .train_ppo_ray import preflight_status

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(
            "usage: python -m mrtpo_openrlhf.cli.preflight <flags of mrtpo_openrlhf.cli.train_ppo_ray>\n"
            "runs the training pre-flight only (the same as adding --preflight-only): exit 0 fine, 2 a problem",
            file=sys.stderr,
        )
        return 2
    return preflight_status([a for a in argv if a != "--preflight-only"])


if __name__ == "__main__":
    sys.exit(main())
