"""Docs that cannot rot (issue 48, item 3): what README.md and docs/*.md show is checked against the code.

- every relative link and anchor resolves (GitHub's heading slugs);
- every command of ours they show (``python -m mrtpo_openrlhf...``, ``python eval/run.py``, ``python benchmarks/...``,
  ``bash examples/...``), parsed out of code blocks and inline code, answers ``--help`` (bash scripts:
  ``DRY_RUN=print``) with exit 0 and output, one run per distinct module and subcommand;
- every module under ``mrtpo_openrlhf/cli/`` prints a usage for ``--help`` under ``python -m`` (run as ``python -m``
  runs it, ``runpy`` as ``__main__``, in children forked from one process that imported torch: ``help_driver.py``);
- every ``--flag`` they name is an option of the command it is given to (a flag named on its own: of any of our
  parsers, the training CLI's included);
- the README's generated blocks are in sync with the results files they come from.

Commands are found by pattern, not listed here, so a command added to the docs later is checked too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PY = sys.executable
ENV = {
    **os.environ,
    "PYTHONPATH": str(REPO),
    "PYTHONWARNINGS": "ignore",
    "OMP_NUM_THREADS": "1",
}  # --help needs no threads
TRAIN = "mrtpo_openrlhf.cli.train_ppo_ray"

FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
ENVS = r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"
# Our commands: python -m <our module> | python eval/run.py | python benchmarks/x.py | bash examples/...sh
COMMAND = re.compile(
    rf"(?P<env>{ENVS})(?:\S*/)?(?:python3?|\.venv/bin/python)\s+(?P<target>-m\s+mrtpo_openrlhf[\w.]*|eval/run\.py|"
    rf"benchmarks/\w+\.py)(?P<rest>[^\n`|;&#]*)|(?P<benv>{ENVS})bash\s+(?P<script>examples/[\w/.-]+\.sh)"
    r"(?P<brest>[^\n`|;&#]*)"
)
FLAG = re.compile(r"(?<![\w=-])--[a-zA-Z][\w.-]*(?:\{[^}\s]*\}[\w.-]*)?")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
# Lines that set one of these describe a GPU run: their DRY_RUN=print is checked on the GPU branch (MRTPO_GPU=1).
GPU_VARS = {"MODEL", "DATA", "RAY_JOB_ADDRESS", "SMOKE", "NUM_GPUS", "NUM_NODES", "MRTPO_SQL_DB_ROOT"}
# Flags of other programs that the docs name on their own, with the program.
EXTERNAL_FLAGS = {
    "--no-build-isolation": "pip",
    "--no-deps": "pip install --no-deps",
    "--dry-run": "pip install --dry-run / study run --dry-run",
    "--runtime-env-json": "ray job submit",
    "--fix": "ruff check --fix",
    "--durations": "pytest",
    "--dist": "pytest -n 2 --dist loadgroup (pytest-xdist)",
    "--include-dashboard": "ray start",
    "--no-monitor": "ray start",
    "--temp-dir": "ray start",
}


def _texts() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in DOCS}


def _rel(p: Path) -> str:
    try:
        return p.relative_to(REPO).as_posix()
    except ValueError:  # a test's tmp file
        return p.as_posix()


# ---------------------------------------------------------------------------------------------------- links, anchors
def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but '-' and '_' removed, spaces -> '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a markdown file has: its headings' slugs (repeats get -1, -2, ...) and HTML ids."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out: set[str] = set(HTML_ID.findall(text))
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def links(text: str) -> list[str]:
    prose = INLINE.sub("", FENCE.sub("", text))
    return LINK.findall(prose) + REF_LINK.findall(prose)


def broken_links(doc: Path, text: str) -> list[str]:
    bad = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{_rel(doc)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{_rel(doc)}: {target}: no heading with that anchor in {_rel(dest)}")
    return bad


def test_slug_follows_githubs_rules():
    assert slug("Adding a reward to an existing task") == "adding-a-reward-to-an-existing-task"
    assert slug("Training dtype (`MRTPO_CPU_DTYPE`)") == "training-dtype-mrtpo_cpu_dtype"
    assert slug("Amendment 1 (2026-12-03): the base model was rebuilt") == (
        "amendment-1-2026-12-03-the-base-model-was-rebuilt"
    )
    assert slug("[docs](docs/x.md) & more") == "docs--more"


def test_the_link_checker_sees_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n\n## Twice\n\n## Twice\n")
    doc = tmp_path / "a.md"
    text = "[ok](b.md#real-heading) [dup](b.md#twice-1) [x](b.md#no-such) [y](c.md) `[z](c.md)` [w](https://x.org)\n"
    doc.write_text(text)
    assert [b.split(": ", 1)[1] for b in broken_links(doc, text)] == [
        "b.md#no-such: no heading with that anchor in " + _rel(tmp_path / "b.md"),
        "c.md: no such file",
    ]


def test_every_relative_link_and_anchor_resolves():
    bad = [b for doc, text in _texts().items() for b in broken_links(doc, text)]
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------------------------------------------- commands
def code_spans(text: str) -> list[str]:
    """Fenced blocks (backslash continuations joined) and inline code spans, in order."""
    out = [m.group(2).replace("\\\n", " ") for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    out += [m.group(2).replace("\n", " ") for m in INLINE.finditer(prose)]
    return out


def _flags(s: str) -> list[str]:
    """The flags named in ``s``, braces expanded (``--a.{b,c}`` -> ``--a.b``, ``--a.c``), ``=value`` dropped."""
    out = []
    for f in FLAG.findall(s):
        m = re.match(r"(.*?)\{([^}]*)\}(.*)", f)
        parts = [m.group(1) + x.split(" ")[0] + m.group(3) for x in m.group(2).split(",")] if m else [f]
        out += [p.split("=")[0].rstrip(".") for p in parts if p]
    return out


def parse_commands(text: str) -> tuple[list[dict], list[str]]:
    """Our commands in ``text``'s code, and the flags named in inline code outside any command."""
    cmds, lone = [], []
    for span in code_spans(text):
        found = False
        for m in COMMAND.finditer(span):
            found = True
            if m.group("script"):
                env = dict(kv.split("=", 1) for kv in m.group("benv").split())
                cmds.append({"kind": "bash", "script": m.group("script"), "env": env, "rest": m.group("brest")})
                continue
            target, rest = m.group("target"), m.group("rest")
            if target.endswith("."):  # a placeholder: `python -m mrtpo_openrlhf.cli.<name>`
                continue
            words = []
            for tok in rest.split():
                if not SUBCOMMAND.match(tok) or len(words) == 2:
                    break
                words.append(tok)
            argv = ["-m", target.split()[1]] if target.startswith("-m") else [target]
            cmds.append({"kind": "python", "argv": argv, "words": words, "rest": rest})
        if not found and span.lstrip().startswith("--"):
            lone += _flags(span)
    return cmds, lone


def _run(argv: tuple[str, ...], env: tuple[tuple[str, str], ...] = (), timeout: int = 240) -> tuple[int, str]:
    try:
        res = subprocess.run(argv, cwd=REPO, env={**ENV, **dict(env)}, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout}s"
    return res.returncode, res.stdout + res.stderr


def _choices(help_text: str) -> set[str]:
    """Subcommand names an argparse usage offers (``{a,b,c}``)."""
    usage = help_text.split("\n\n", 1)[0]
    return {w for group in re.findall(r"\{([\w,-]+)\}", usage) for w in group.split(",")}


@lru_cache(maxsize=1)
def doc_commands() -> tuple[list[tuple[Path, dict]], list[tuple[Path, str]]]:
    cmds, lone = [], []
    for doc, text in _texts().items():
        c, f = parse_commands(text)
        cmds += [(doc, x) for x in c]
        lone += [(doc, x) for x in f]
    return cmds, lone


def _parallel(calls: set[tuple]) -> dict[tuple, tuple[int, str]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(calls, pool.map(lambda c: _run(*c), calls)))


def _python_helps(argvs: set[tuple[str, ...]]) -> dict[tuple[str, ...], tuple[int, str]]:
    """``--help`` of each argv (``("-m", module, *words)`` or ``(script, *words)``), run as ``python`` runs it, by
    ``help_driver.py`` (one torch import for all)."""
    order = sorted(argvs)
    res = subprocess.run(
        [PY, str(Path(__file__).with_name("help_driver.py"))],
        input=json.dumps([[*a, "--help"] for a in order]),
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return {a: (rc, out) for a, (rc, out) in zip(order, json.loads(res.stdout))}


@lru_cache(maxsize=1)
def helps() -> dict[tuple, tuple[int, str]]:
    """``--help`` of each distinct module and subcommand the docs show, every cli module's and the training CLI's.
    Subcommands are resolved from each parser's own choices."""
    cmds, _ = doc_commands()
    cli = sorted(p.stem for p in (REPO / "mrtpo_openrlhf" / "cli").glob("*.py") if p.stem != "__init__")
    tops = {tuple(c["argv"]) for _, c in cmds if c["kind"] == "python"}
    tops |= {("-m", f"mrtpo_openrlhf.cli.{m}") for m in cli}
    out = _python_helps(tops)
    # one level of subcommands, then a second, where the parser offers them
    for depth in (1, 2):
        want = set()
        for _, c in cmds:
            if c["kind"] != "python" or len(c["words"]) < depth:
                continue
            parent = (*c["argv"], *c["words"][: depth - 1])
            if parent in out and c["words"][depth - 1] in _choices(out[parent][1]):
                want.add((*c["argv"], *c["words"][:depth]))
        if want:
            out.update(_python_helps(want))
    return out


def resolve(c: dict) -> tuple[tuple[str, ...], str]:
    """The deepest parser of ``c`` the docs' words name, and its help."""
    h = helps()
    key = tuple(c["argv"])
    for w in c["words"]:
        nxt = (*key, w)
        if nxt not in h:
            break
        key = nxt
    return key, h[key][1]


def test_every_python_command_in_the_docs_answers_help():
    cmds, _ = doc_commands()
    assert any(c.get("argv") == ["-m", TRAIN] for _, c in cmds), "the parser found no training command"
    bad = set()
    for doc, c in cmds:
        if c["kind"] != "python":
            continue
        key, _ = resolve(c)
        rc, out = helps()[key]
        if rc != 0 or not out.strip():
            bad.add(f"{_rel(doc)}: python {' '.join(key)} --help: exit {rc}: {out.strip()[-300:]}")
        top = helps()[tuple(c["argv"])][1]
        subs = _choices(top)
        if subs and c["words"] and c["words"][0] not in subs and c["argv"][-1] != "mrtpo_openrlhf.cli.task":
            bad.add(f"{_rel(doc)}: python {' '.join(c['argv'])} {c['words'][0]}: not one of {sorted(subs)}")
    assert not bad, "\n".join(sorted(bad))


def test_every_cli_module_prints_its_usage_under_python_m():
    """A module without a ``__main__`` block exits 0 and prints nothing under ``python -m``: that fails here."""
    bad = []
    for key, (rc, out) in sorted(helps().items()):
        if len(key) == 2 and key[1].startswith("mrtpo_openrlhf.cli.") and (rc != 0 or "usage" not in out.lower()):
            bad.append(f"python -m {key[1]} --help: exit {rc}, no usage: {out.strip()[-200:]!r}")
    assert not bad, "\n".join(bad)


def _bash_call(c: dict) -> tuple:
    env = {**c["env"], "DRY_RUN": "print"}
    if GPU_VARS & set(c["env"]):
        env["MRTPO_GPU"] = "1"
    if "RAY_JOB_ADDRESS" in env and "OUT" not in env:
        env["OUT"] = "/tmp/mrtpo-docs-out"
    args = [a for a in shlex.split(c["rest"]) if not a.startswith("<")]
    return ("bash", c["script"], *args), tuple(sorted(env.items()))


def test_every_training_script_in_the_docs_prints_its_command():
    """``DRY_RUN=print`` prints the command a script would run, exit 0 (lines that set a GPU variable: the GPU
    branch, as on a GPU machine; the others the CPU branch this machine takes)."""
    cmds, _ = doc_commands()
    calls = {_bash_call(c): (doc, c) for doc, c in cmds if c["kind"] == "bash"}
    assert calls, "the parser found no bash examples/... command"
    results = _parallel({(argv, env) for argv, env in calls})
    bad = []
    for (argv, env), (doc, c) in calls.items():
        rc, out = results[(argv, env)]
        if rc != 0 or "mrtpo_openrlhf.cli.train_ppo_ray" not in out:
            shown = " ".join(f"{k}={v}" for k, v in env) + " " + " ".join(argv)
            bad.append(f"{_rel(doc)}: {shown}: exit {rc}: {out.strip()[-300:]}")
    assert not bad, "\n".join(bad)


@lru_cache(maxsize=1)
def train_flags() -> frozenset[str]:
    rc, out = helps()[("-m", TRAIN)]
    assert rc == 0, out
    return frozenset(_flags(out))


def test_every_flag_the_docs_name_exists_in_its_parser():
    cmds, lone = doc_commands()
    every = set(train_flags())
    for rc, out in helps().values():
        every |= set(_flags(out))
    bad = set()
    for doc, c in cmds:
        if c["kind"] == "bash":  # flags after a script go to the training CLI
            known, who = train_flags(), TRAIN
        else:
            key, text = resolve(c)
            known, who = set(_flags(text)), " ".join(key)
            if c["argv"] == ["-m", TRAIN]:
                known |= train_flags()
        for f in _flags(c["rest"]):
            if f not in known and f != "--help":
                bad.add(f"{_rel(doc)}: {f} is not an option of {who}")
    families = {k[: i + 1] for k in every for i in range(len(k)) if k[i] == "."}  # `--algo.mrtpo.*`
    for doc, f in lone:
        if f not in every and f not in EXTERNAL_FLAGS and f + "." not in families:
            bad.add(f"{_rel(doc)}: {f} is not an option of any of our commands")
    assert not bad, "\n".join(sorted(bad))


def test_the_command_parser_finds_commands_and_flags():
    text = (
        "```bash\nRAY_JOB_ADDRESS=http://h:8265 MODEL=m \\\n  bash examples/scripts/train_mrtpo_sql.sh --x.y 1\n"
        "python -m mrtpo_openrlhf.cli.study run CONFIG.toml --dry-run   # note\n```\n"
        "Run `python eval/run.py --benchmark bird`, set `--algo.mrtpo.{beta,cap}` or `pip install --no-deps x`.\n"
    )
    cmds, lone = parse_commands(text)
    assert [c["kind"] for c in cmds] == ["bash", "python", "python"]
    assert cmds[0]["env"] == {"RAY_JOB_ADDRESS": "http://h:8265", "MODEL": "m"} and _flags(cmds[0]["rest"]) == ["--x.y"]
    assert cmds[1]["argv"] == ["-m", "mrtpo_openrlhf.cli.study"] and cmds[1]["words"] == ["run"]
    assert _flags(cmds[1]["rest"]) == ["--dry-run"]
    assert cmds[2]["argv"] == ["eval/run.py"] and _flags(cmds[2]["rest"]) == ["--benchmark"]
    assert lone == ["--algo.mrtpo.beta", "--algo.mrtpo.cap"]


# -------------------------------------------------------------------------------------------- generated figures
def test_the_readmes_generated_blocks_are_in_sync_with_their_results():
    """The evidence and cost blocks: ``python -m mrtpo_openrlhf.cli.study readme <dir>`` regenerates them."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    studies = sorted(set(re.findall(r"<!-- study-(?:evidence|cost):([\w.-]+):begin -->", readme)))
    assert studies, "the README has no generated block"
    for name in studies:
        rc, out = _run((PY, "-m", "mrtpo_openrlhf.cli.study", "readme", f"docs/results/{name}", "--check"))
        assert rc == 0, out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: _rel(p))
def test_no_doc_is_empty(doc):
    assert doc.read_text(encoding="utf-8").strip()


def test_the_help_driver_runs_a_command_as_python_does(tmp_path):
    """Against ``python`` itself: a module with a ``__main__`` block prints its usage, one without prints nothing and
    exits 0 (the failure the cli test catches), a missing module fails, a script runs with its folder on the path."""
    (tmp_path / "with_main.py").write_text(
        "import argparse\nif __name__ == '__main__':\n    argparse.ArgumentParser(prog='w').parse_args()\n"
    )
    (tmp_path / "no_main.py").write_text(
        "import argparse\n\n\ndef main():\n    argparse.ArgumentParser().parse_args()\n"
    )
    (tmp_path / "helper.py").write_text("X = 'from the folder'\n")
    script = tmp_path / "script.py"
    script.write_text("import sys\nimport helper\nprint(helper.X, sys.argv[1:])\nsys.exit(3)\n")
    jobs = [["-m", "with_main"], ["-m", "no_main"], ["-m", "no_such_module_here"], [str(script)]]
    env = {**ENV, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    res = subprocess.run(
        [PY, str(Path(__file__).with_name("help_driver.py"))],
        input=json.dumps([[*j, "--help"] for j in jobs]),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    for job, (rc, out) in zip(jobs, got):
        real = subprocess.run([PY, *job, "--help"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert rc == real.returncode, (job, out, real.stderr)
        if rc == 0 or job[0] != "-m":  # a missing module's message differs in form, not in exit code
            assert out.strip() == (real.stdout + real.stderr).strip(), job
    assert got[0][1].startswith("usage: w") and got[1] == [0, ""] and got[3][0] == 3
