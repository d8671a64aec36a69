"""The package as users install it: its metadata, a console command beside each ``python -m`` one, the version every
run records (``run.json``), and a CHANGELOG entry for that version."""

from __future__ import annotations

import configparser
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import mrtpo_openrlhf
from mrtpo_openrlhf.provenance import provenance, record_run

REPO = Path(__file__).resolve().parents[2]
COMMANDS = (
    "mrtpo-train",
    "mrtpo-default",
    "mrtpo-eval",
    "mrtpo-doctor",
    "mrtpo-diagnose",
    "mrtpo-study",
    "mrtpo-serve",
)


def setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg


def console_scripts() -> dict[str, str]:
    lines = setup_cfg()["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict((part.strip() for part in line.split("=", 1)) for line in lines)


def test_each_console_command_is_a_cli_module_main():
    scripts = console_scripts()
    assert set(scripts) == set(COMMANDS)
    for name, target in scripts.items():
        module, func = target.split(":")
        assert module.startswith("mrtpo_openrlhf.cli."), name
        assert callable(getattr(importlib.import_module(module), func)), name
        assert (REPO / Path(*module.split("."))).with_suffix(".py").is_file(), name


def test_console_command_and_python_m_answer_help_alike():
    """``mrtpo-doctor --help`` (the entry point's function) says what ``python -m ...doctor --help`` says."""
    target = console_scripts()["mrtpo-doctor"]
    module, func = target.split(":")
    call = f"import sys; sys.argv[0] = 'mrtpo-doctor'; from {module} import {func}; sys.exit({func}(['--help']))"
    via_entry = subprocess.run([sys.executable, "-c", call], capture_output=True, text=True, timeout=120, cwd=REPO)
    via_m = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert via_entry.returncode == via_m.returncode == 0
    assert via_entry.stdout.split("\n", 2)[2] == via_m.stdout.split("\n", 2)[2]  # past the usage line's program name


def test_metadata_says_what_it_is():
    meta = setup_cfg()["metadata"]
    assert meta["version"] == "attr: mrtpo_openrlhf.__version__"
    classifiers = meta["classifiers"]
    for needed in (
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ):
        assert needed in classifiers, needed  # fmt: skip
    assert "https://github.com/OpenRLHF/OpenRLHF" in meta["project_urls"]
    assert setup_cfg()["options"]["python_requires"] == ">=3.10, <3.14"
    assert "flash-attn" not in setup_cfg()["options.extras_require"]["gpu"]  # built by scripts/install_gpu.sh


def test_every_run_records_the_version_and_the_changelog_has_it(tmp_path):
    assert re.fullmatch(r"\d+\.\d+\.\d+", mrtpo_openrlhf.__version__)
    assert provenance()["version"] == mrtpo_openrlhf.__version__
    record_run(tmp_path)  # a run without the CPU launcher (the GPU path: the trainer writes it)
    assert json.loads((tmp_path / "run.json").read_text())["provenance"]["version"] == mrtpo_openrlhf.__version__
    (tmp_path / "run.json").write_text('{"kept": 1}')
    record_run(tmp_path)  # the launcher's own run.json is never replaced
    assert json.loads((tmp_path / "run.json").read_text()) == {"kept": 1}
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {mrtpo_openrlhf.__version__}" in changelog
