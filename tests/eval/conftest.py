"""Helpers for the evaluation-harness tests: run the CLI in-process on small hand-checked fixtures."""

import json
import shutil
from pathlib import Path

import pytest

from mrtpo_openrlhf.cli.evaluate import main

BUNDLED_SQL = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data" / "sql"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def read_records(out: Path, benchmark: str) -> dict:
    lines = (out / f"{benchmark}.records.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


def read_records_list(out: Path, benchmark: str) -> list:
    lines = (out / f"{benchmark}.records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def read_summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


@pytest.fixture
def run_cli(tmp_path):
    """run_cli(args...) -> (exit code, out dir); the out dir is a fresh folder under tmp_path."""
    counter = {"n": 0}

    def run(*args):
        counter["n"] += 1
        out = tmp_path / f"out{counter['n']}"
        code = main([*map(str, args), "--out", str(out)])
        return code, out

    return run


def make_spider_dir(root: Path, items: list[dict], extra_dbs: dict[str, list[tuple[str, str]]] | None = None) -> Path:
    """A Spider-layout folder: dev.json = ``items``, databases copied from the bundled fixtures.

    ``extra_dbs``: {db_id: [(source bundled db_id, extra file name), ...]} adds test-suite database variants.
    """
    db_root = root / "database"
    for db_id in {it["db_id"] for it in items}:
        (db_root / db_id).mkdir(parents=True, exist_ok=True)
        source = db_id if (BUNDLED_SQL / "database" / db_id).is_dir() else db_id.split("_")[0]
        shutil.copy(BUNDLED_SQL / "database" / source / f"{source}.sqlite", db_root / db_id / f"{db_id}.sqlite")
    for db_id, variants in (extra_dbs or {}).items():
        for source, name in variants:
            shutil.copy(BUNDLED_SQL / "database" / source / f"{source}.sqlite", db_root / db_id / name)
    (root / "dev.json").write_text(json.dumps(items), encoding="utf-8")
    return root


@pytest.fixture
def kit():
    """The helpers above as one object (test modules cannot import conftest under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        write_jsonl=write_jsonl,
        read_records=read_records,
        read_records_list=read_records_list,
        read_summary=read_summary,
        make_spider_dir=make_spider_dir,
    )
