"""Unit tests of the CPU patch layer, without Ray: each patch on the real upstream module or a twin of it."""

import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from types import SimpleNamespace

import pytest
import torch

from mrtpo_openrlhf.cpu import SITE_DIR, hooks, patches
from mrtpo_openrlhf.cpu.flash_attn_stub import index_first_axis, pad_input, unpad_input
from mrtpo_openrlhf.cpu.gloo_sync import GlooWeightSyncGroup
from mrtpo_openrlhf.metrics import append_step, continue_at, numeric_metrics, read_metrics

REPO = SITE_DIR.parents[2]


def run_python(code, env_extra, timeout=240):
    """Run ``code`` in a fresh interpreter with the sitecustomize folder on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO)]), **env_extra)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# ---------------------------------------------------------------- hooks


def test_when_imported_runs_after_module_exec(tmp_path, monkeypatch):
    (tmp_path / "mrtpo_hook_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks.when_imported("mrtpo_hook_probe", lambda module: seen.append(module.VALUE))
    assert seen == []
    import mrtpo_hook_probe  # noqa: F401

    assert seen == [1]
    assert "mrtpo_hook_probe" not in hooks.pending_modules()
    # already imported: runs at once; and the original loader is back on the module
    hooks.when_imported("mrtpo_hook_probe", lambda module: seen.append(2))
    assert seen == [1, 2]
    assert type(mrtpo_hook_probe.__loader__).__name__ == "SourceFileLoader"


def test_sitecustomize_is_inert_without_flag():
    out = run_python(
        """
        import sys
        import mrtpo_openrlhf.cpu.hooks as h
        print(sorted(h._pending), 'torch' in sys.modules)
        """,
        {"MRTPO_CPU": "0"},
    )
    assert out.strip() == "[] False"


def test_sitecustomize_applies_lazily_and_patches_torch_cuda():
    out = run_python(
        """
        import sys
        print('torch' in sys.modules)
        import torch
        torch.cuda.set_device(0); torch.cuda.synchronize(); torch.cuda.empty_cache()
        print(torch.cuda.current_device(), torch.cuda.is_available(), torch.cuda.current_stream())
        """,
        {"MRTPO_CPU": "1"},
    )
    assert out.split() == ["False", "cpu", "False", "None"]


def test_patches_fire_on_upstream_import_in_a_fresh_process():
    out = run_python(
        """
        import openrlhf.utils.deepspeed.deepspeed as ds
        import openrlhf.trainer.ray.ppo_actor as pa
        import openrlhf.utils.distributed_util as du
        import openrlhf.trainer.ray.vllm_worker_wrap as ww
        import openrlhf.trainer.ppo_trainer as pt
        import openrlhf.trainer.ray.vllm_engine as ve
        from openrlhf.utils import utils as ou
        from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer
        import deepspeed.runtime.zero.stage3 as s3
        import vllm.v1.worker.cpu_worker as cw
        from mrtpo_openrlhf.cpu import patches, hooks
        flag = lambda f: getattr(f, patches.MARK, False)
        print(flag(ds.init_device_mesh), flag(ds.DeepspeedStrategy.get_ds_train_config),
              flag(pa.stateless_init_process_group), flag(du.stateless_init_process_group),
              flag(ww.WorkerWrap.update_weight), flag(pt.BasePPOTrainer.save_logs_and_checkpoints),
              flag(ds.DeepspeedStrategy.__init__), flag(ou.convert_to_torch_dtype),
              flag(ve.RolloutRayActor.__ray_metadata__.modified_class.__init__),
              flag(s3.DeepSpeedZeroOptimizer_Stage3._create_fp32_partitions), flag(cw.CPUWorker.sleep),
              type(ve.vllm).__name__, NaiveReplayBuffer(4).target_device, hooks.pending_modules())
        """,
        {"MRTPO_CPU": "1"},
    )
    assert out.split()[-14:] == ["True"] * 11 + ["_VllmWithEngineInActor", "cpu", "[]"]


def test_apply_is_idempotent():
    patches.apply()
    assert patches.apply() == []


# ---------------------------------------------------------------- individual patches on twins


def test_cuda_noops_on_a_fake_torch_module():
    calls = []
    fake_cuda = SimpleNamespace(
        is_available=lambda: False,
        current_device=lambda: calls.append("assert") or (_ for _ in ()).throw(AssertionError("no CUDA")),
    )
    fake_torch = SimpleNamespace(cuda=fake_cuda, device=torch.device)
    patches.cuda_noops_and_cpu_device(fake_torch)
    fake_cuda.synchronize()
    assert fake_cuda.current_device() == torch.device("cpu")
    first = fake_cuda.current_device
    patches.cuda_noops_and_cpu_device(fake_torch)  # idempotent
    assert fake_cuda.current_device is first and calls == []


def test_device_mesh_maps_cuda_to_cpu():
    seen = []

    class DeepspeedStrategy:
        def setup_distributed(self):
            init_device_mesh("cuda", (1, 1, 1))  # noqa: F821 (only its source is read)

    module = types.ModuleType("fake_ds")
    module.DeepspeedStrategy = DeepspeedStrategy
    module.init_device_mesh = lambda device_type, *a, **k: seen.append(device_type)
    patches.device_mesh_on_cpu(module)
    module.init_device_mesh("cuda", (1,))
    module.init_device_mesh("meta", (1,))
    assert seen == ["cpu", "meta"]


def test_ema_update_runs_on_the_cpu():
    seen = []

    class DeepspeedStrategy:
        def moving_average(self, model, model_ema, beta=0.992, device="cpu"):
            for param, param_ema in zip(model, model_ema):  # upstream's update, without ZeRO
                data = param.data.to(device)
                seen.append(data.device.type)
                param_ema.data.copy_((1 - beta) * data + beta * param_ema.data)

    module = types.ModuleType("fake_ds")
    module.DeepspeedStrategy = DeepspeedStrategy
    model, ema = [torch.ones(2)], [torch.zeros(2)]
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):  # what a CPU build does without the patch
            DeepspeedStrategy().moving_average(model, ema, 0.75, "cuda")
    patches.ema_on_cpu(module)
    patches.ema_on_cpu(module)  # idempotent
    DeepspeedStrategy().moving_average(model, ema, 0.75, "cuda")
    assert seen[-1] == "cpu" and torch.allclose(ema[0], torch.full((2,), 0.25))


def test_require_source_fails_loudly_when_call_site_is_gone():
    class DeepspeedStrategy:
        def setup_distributed(self):
            return "no mesh here"

    module = types.ModuleType("fake_ds")
    module.DeepspeedStrategy, module.init_device_mesh = DeepspeedStrategy, lambda *a: None
    with pytest.raises(patches.UpstreamChanged, match="init_device_mesh"):
        patches.device_mesh_on_cpu(module)


def test_torch_adam_flag_added_to_adamw_config(monkeypatch):
    class DeepspeedStrategy:
        def _ds_init_train_model(self):
            return self.get_ds_train_config(optim_dict={})

        def get_ds_train_config(self, optim_dict=None):
            return {"optimizer": {"type": "AdamW", "params": {"lr": 1.0}}} if optim_dict is not None else {}

    module = types.ModuleType("fake_ds")
    module.DeepspeedStrategy = DeepspeedStrategy
    patches.deepspeed_torch_adam(module)
    assert DeepspeedStrategy().get_ds_train_config(optim_dict={})["optimizer"]["params"]["torch_adam"] is True
    assert DeepspeedStrategy().get_ds_train_config() == {}
    monkeypatch.setenv("MRTPO_CPU_TORCH_ADAM", "0")
    assert "torch_adam" not in DeepspeedStrategy().get_ds_train_config(optim_dict={})["optimizer"]["params"]


def _fake_comm_module():
    module = types.ModuleType("fake_ds_comm")
    module.built = []

    def build_shm_op():
        module.built.append(1)
        return "op"

    class TorchBackend:
        def __init__(self):
            self.shm_comm_op = build_shm_op()

    module.build_shm_op, module.TorchBackend = build_shm_op, TorchBackend
    return module


def test_no_shm_op_built_unless_asked(monkeypatch):
    module = _fake_comm_module()
    patches.deepspeed_no_shm_op(module)
    patches.deepspeed_no_shm_op(module)  # idempotent
    assert module.build_shm_op() is None and module.built == []
    monkeypatch.setenv("MRTPO_CPU_SHM_OP", "1")
    assert module.build_shm_op() == "op" and module.built == [1]


def test_real_deepspeed_comm_backend_skips_the_shm_build():
    """In a fresh CPU-layer process the real ``build_shm_op`` returns at once, without a compiler; DeepSpeed's
    ``inference_all_reduce`` (its only user) falls back to torch's all-reduce when the op is missing."""
    pytest.importorskip("deepspeed")
    out = run_python(
        """
        import importlib, time
        comm = importlib.import_module("deepspeed.comm.torch")  # `import ... as` would find deepspeed.comm's torch
        start = time.time()
        print(comm.build_shm_op() is None, time.time() - start < 5)
        """,
        {"MRTPO_CPU": "1"},
    )
    assert out.split()[-2:] == ["True", "True"], out


def _fake_cpu_platform():
    module = types.ModuleType("fake_vllm_platforms_cpu")

    class CpuPlatform:
        @classmethod
        def check_and_update_config(cls, vllm_config):
            parallel_config = vllm_config.parallel_config
            if parallel_config.distributed_executor_backend == "uni":
                parallel_config.distributed_executor_backend = "mp"
            vllm_config.original_ran = True

    module.CpuPlatform = CpuPlatform
    return module


@pytest.mark.parametrize(
    "asked, flag, want", [("uni", None, "uni"), ("uni", "1", "mp"), ("mp", None, "mp"), ("ray", None, "ray")]
)
def test_vllm_keeps_the_uniproc_executor_it_was_asked_for(monkeypatch, asked, flag, want):
    module = _fake_cpu_platform()
    patches.vllm_uniproc_executor(module)
    patches.vllm_uniproc_executor(module)  # idempotent
    if flag:
        monkeypatch.setenv("MRTPO_CPU_VLLM_MP", flag)
    config = SimpleNamespace(parallel_config=SimpleNamespace(distributed_executor_backend=asked))
    module.CpuPlatform.check_and_update_config(config)
    assert config.parallel_config.distributed_executor_backend == want and config.original_ran


def test_uniproc_patch_fails_loudly_without_the_override():
    module = types.ModuleType("fake_vllm_platforms_cpu")

    class CpuPlatform:
        @classmethod
        def check_and_update_config(cls, vllm_config):
            return None

    module.CpuPlatform = CpuPlatform
    with pytest.raises(patches.UpstreamChanged, match="uni -> mp"):
        patches.vllm_uniproc_executor(module)


def _fake_ds_utils():
    module = types.ModuleType("fake_deepspeed_utils")
    module.offload_deepspeed_states = lambda model, pin_memory=True, non_blocking=True: model.optimizer.offload_states()
    module.reload_deepspeed_states = lambda model, non_blocking=True: model.reload_states()
    return module


def test_deepspeed_sleep_releases_gradient_buffers_and_restores_them_zeroed(monkeypatch):
    monkeypatch.setenv("MRTPO_CPU_ACTOR_TRIM", "0")
    module = _fake_ds_utils()
    patches.deepspeed_sleep_frees_grads(module)
    flat = torch.arange(12, dtype=torch.float32)
    views = [flat.narrow(0, 0, 5), flat.narrow(0, 5, 7)]  # what DeepSpeed keeps per parameter
    bucket = SimpleNamespace(buffer=torch.ones(4))
    optimizer = SimpleNamespace(grad_partitions_flat_buffer=flat, ipg_buckets={torch.float32: bucket})
    stage = {"value": 3}
    model = SimpleNamespace(
        optimizer=optimizer,
        empty_partition_cache=lambda: None,
        zero_optimization_stage=lambda: stage["value"],
        config={"zero_optimization": {"offload_optimizer": {"device": "none"}}},
    )
    stage["value"] = 2  # ZeRO-1/2 keep a list of buffers per bucket: left alone
    module.offload_deepspeed_states(model)
    assert flat.untyped_storage().nbytes() == 48
    stage["value"] = 3
    module.offload_deepspeed_states(model)
    assert flat.untyped_storage().nbytes() == 0 and bucket.buffer.untyped_storage().nbytes() == 0
    module.offload_deepspeed_states(model)  # twice asleep: still one entry per storage
    module.reload_deepspeed_states(model)
    assert flat.untyped_storage().nbytes() == 48 and bucket.buffer.untyped_storage().nbytes() == 16
    views[1].add_(2.0)  # the views write into the restored buffer
    assert flat.tolist() == [0.0] * 5 + [2.0] * 7 and bucket.buffer.tolist() == [0.0] * 4


def test_deepspeed_sleep_patch_refuses_changed_upstream():
    module = _fake_ds_utils()
    module.offload_deepspeed_states = lambda model: None
    with pytest.raises(patches.UpstreamChanged, match="offloads the ZeRO-3"):
        patches.deepspeed_sleep_frees_grads(module)


def test_replay_buffer_target_is_cpu_on_real_upstream():
    patches.apply()
    torch.cuda.current_device()  # patched in this process by apply() (torch already imported)
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    buffer = NaiveReplayBuffer(2)
    assert buffer.target_device == torch.device("cpu") and buffer.sample_batch_size == 2


def test_metrics_patch_appends_jsonl(tmp_path, monkeypatch):
    calls = []

    class BasePPOTrainer:
        def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
            # logging cadence: global_step % self.args.logger.logging_steps == 0
            calls.append(global_step)

    module = types.ModuleType("fake_trainer")
    module.BasePPOTrainer = BasePPOTrainer
    patches.metrics_jsonl(module)
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv("MRTPO_METRICS_JSONL", str(path))
    trainer = BasePPOTrainer()
    trainer.args = SimpleNamespace(logger=SimpleNamespace(logging_steps=2))
    for step in (1, 2, 3, 4):
        trainer.save_logs_and_checkpoints(step, {"loss": torch.tensor(0.5), "generated_samples": ["x", 1.0]})
    assert calls == [1, 2, 3, 4]
    assert read_metrics(path) == [{"step": 2, "loss": 0.5}, {"step": 4, "loss": 0.5}]


def _fake_ppo_trainer_module(calls):
    class BasePPOTrainer:
        def train_step(self, rollout_samples, global_step):
            calls.append(("train_step", global_step))
            self.broadcast_to_vllm()  # every step ends in the weight sync
            return {}, global_step + 1

        def broadcast_to_vllm(self):
            calls.append(("sync",))

    module = types.ModuleType("fake_ppo_trainer")
    module.BasePPOTrainer = BasePPOTrainer
    module.batch_vllm_engine_call = lambda engines, method, *args, **kwargs: calls.append((method, kwargs))
    return module


@pytest.mark.parametrize(
    "enable_sleep, env, released",
    [
        (True, {}, True),
        (False, {}, False),  # awake engine: nothing sleeps
        (True, {"MRTPO_CPU_SKIP_WEIGHT_SYNC": "1"}, False),  # the sync would not load: keep them
        (True, {"MRTPO_CPU_VLLM_RELEASE_WEIGHTS": "0"}, False),
        (True, {"MRTPO_CPU_VLLM_CORE_IN_ACTOR": "0"}, False),  # vLLM's own engine process: level 2 never arrives
    ],
)
def test_a_train_step_releases_vllms_weights_before_its_sync(monkeypatch, enable_sleep, env, released):
    for name in ("MRTPO_CPU_SKIP_WEIGHT_SYNC", "MRTPO_CPU_VLLM_RELEASE_WEIGHTS", "MRTPO_CPU_VLLM_CORE_IN_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls = []
    module = _fake_ppo_trainer_module(calls)
    patches.vllm_weights_released_for_the_sync(module)
    patches.vllm_weights_released_for_the_sync(module)  # idempotent
    trainer = module.BasePPOTrainer()
    trainer.vllm_engines = ["engine"]
    trainer.args = SimpleNamespace(vllm=SimpleNamespace(enable_sleep=enable_sleep))
    assert trainer.train_step([], 3) == ({}, 4)
    want = [("sleep", {"level": 2})] if released else []
    assert calls == want + [("train_step", 3), ("sync",)]


def test_weight_release_refuses_a_train_step_without_the_sync():
    module = _fake_ppo_trainer_module([])
    module.BasePPOTrainer.train_step = lambda self, rollout_samples, global_step: ({}, global_step + 1)
    with pytest.raises(patches.UpstreamChanged, match="ends in the weight sync"):
        patches.vllm_weights_released_for_the_sync(module)


def test_released_linears_raise_until_packed_again():
    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cpu_linear = lambda x, weight, bias: x * 2

    model = torch.nn.Sequential(Linear(), torch.nn.Sequential(Linear()), torch.nn.ReLU())
    assert patches.released_linears(model) == []
    assert patches.release_packed_linears(model) == 2
    assert patches.release_packed_linears(model) == 0  # already released
    assert patches.released_linears(model) == ["0", "1.0"]
    with pytest.raises(RuntimeError, match="'1.0' runs without weights"):
        model[1][0].cpu_linear(torch.ones(1), None, None)
    model[0].cpu_linear = lambda x, weight, bias: x  # what a reload's process_weights_after_loading does
    assert patches.released_linears(model) == ["1.0"]


def test_metrics_helpers(tmp_path):
    assert numeric_metrics({"a": 1, "b": True, "c": "x", "d": torch.tensor([2.0]), "e": float("nan")})["d"] == 2.0
    path = tmp_path / "m.jsonl"
    append_step(path, 1, {"x": float("nan")})
    with open(path, "a") as handle:
        handle.write('{"step": 2, "x"')  # torn last line: skipped
    records = read_metrics(path)
    assert len(records) == 1 and records[0]["x"] != records[0]["x"]  # NaN survives the round trip
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_metrics(path)


def test_continue_at_keeps_steps_up_to_the_checkpoint_and_moves_the_rest_aside(tmp_path):
    path = tmp_path / "m.jsonl"
    assert continue_at(path, 2) == (0, None) and not path.exists()
    for step in (1, 2, 3):
        append_step(path, step, {"loss": float(step)})
    with open(path, "a") as handle:
        handle.write('{"step": 4, "lo')  # the interrupted run died mid-write
    moved, aside = continue_at(path, 2)
    assert moved == 1  # step 3 (the torn line is not a row)
    assert read_metrics(path) == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}]
    assert read_metrics(aside) == [{"step": 3, "loss": 3.0}] and aside.name.startswith("m.jsonl.superseded-")
    append_step(path, 3, {"loss": 9.0})  # the resumed run continues the same file
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert continue_at(path, 3) == (0, None)  # nothing after the checkpoint: the file is not touched


def test_a_relaunch_without_a_checkpoint_deletes_no_logged_step(tmp_path):
    """Issue 26 item 4: a run that crashed before its first checkpoint (or whose checkpoint the trainer cannot see)
    is relaunched: the trainer starts at step 0, and the steps logged before survive, in order, next to the file."""
    path = tmp_path / "metrics.jsonl"
    for step in (1, 2, 3):
        append_step(path, step, {"loss": float(step)})
    before = read_metrics(path)
    moved, first = continue_at(path, 0)
    assert moved == 3 and read_metrics(first) == before and path.read_text() == ""
    append_step(path, 1, {"loss": 7.0})  # the relaunch logs its own step 1
    moved, second = continue_at(path, 0)  # and crashes again before a checkpoint
    assert moved == 1 and second != first and read_metrics(second) == [{"step": 1, "loss": 7.0}]
    assert read_metrics(first) == before  # an earlier set-aside file is never overwritten


def test_zero3_persistence_threshold_from_the_environment(monkeypatch):
    class DeepspeedStrategy:
        def get_ds_train_config(self, optim_dict=None):
            return {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": "auto"}}

        def get_ds_eval_config(self, offload=False):
            return {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": "auto"}}

    module = types.ModuleType("fake_ds")
    module.DeepspeedStrategy = DeepspeedStrategy
    patches.zero3_persistence_threshold(module)
    patches.zero3_persistence_threshold(module)  # idempotent
    key = "stage3_param_persistence_threshold"
    monkeypatch.delenv("MRTPO_CPU_ZERO3_PERSISTENCE", raising=False)
    assert DeepspeedStrategy().get_ds_train_config()["zero_optimization"][key] == "auto"  # upstream's default
    monkeypatch.setenv("MRTPO_CPU_ZERO3_PERSISTENCE", "0")
    assert DeepspeedStrategy().get_ds_train_config(optim_dict={})["zero_optimization"][key] == 0
    assert DeepspeedStrategy().get_ds_eval_config(offload=True)["zero_optimization"][key] == 0


# ---------------------------------------------------------------- fp32 on CPUs without bf16 instructions


def ds_run_args(param_dtype="bf16"):
    """The part of train_ppo_ray's args that get_strategy and DeepspeedStrategy read."""
    return SimpleNamespace(
        ds=SimpleNamespace(param_dtype=param_dtype, zero_stage=3),
        train=SimpleNamespace(seed=1, micro_batch_size=2, batch_size=4),
        vllm=SimpleNamespace(enable_sleep=False),
    )


@pytest.mark.parametrize(
    "choice, param_dtype, ds_bf16, torch_dtype",
    [
        ("fp32", "fp32", False, torch.float32),
        ("bf16", "bf16", True, torch.bfloat16),
    ],
)
def test_dtype_choice_reaches_deepspeed_config_and_hf_load(
    monkeypatch, tmp_path, choice, param_dtype, ds_bf16, torch_dtype
):
    """The real get_strategy -> DeepspeedStrategy -> DeepSpeed configs and the real Actor HF load."""
    patches.apply()
    from openrlhf.models import Actor
    from openrlhf.utils import get_strategy

    from mrtpo_openrlhf.models import make_tiny_model

    monkeypatch.setenv("MRTPO_CPU_DTYPE", choice)
    strategy = get_strategy(ds_run_args("bf16"))  # what the CPU recipes pass on the command line
    assert strategy.args.ds.param_dtype == param_dtype and strategy.param_dtype == param_dtype
    for config in (strategy.get_ds_train_config(optim_dict=None), strategy.get_ds_eval_config()):
        assert config["bf16"]["enabled"] is ds_bf16 and config["fp16"]["enabled"] is False, config
    # the actor/reference loaders pass strategy.args.ds.param_dtype; the saved tiny model is bf16 on disk
    model = make_tiny_model(tmp_path / "tiny", hidden_size=64, intermediate_size=64)
    actor = Actor(str(model), attn_implementation="sdpa", param_dtype=strategy.args.ds.param_dtype)
    assert {p.dtype for p in actor.model.parameters()} == {torch_dtype}


def test_fp32_leaves_fp16_runs_alone_only_when_bf16_chosen(monkeypatch):
    patches.apply()
    from openrlhf.utils import get_strategy

    monkeypatch.setenv("MRTPO_CPU_DTYPE", "bf16")
    assert get_strategy(ds_run_args("fp16")).param_dtype == "fp16"  # an explicit flag is kept
    monkeypatch.setenv("MRTPO_CPU_DTYPE", "fp32")
    assert get_strategy(ds_run_args("fp16")).param_dtype == "fp32"  # fp32 chosen: the run is fp32


def test_convert_to_torch_dtype_learns_fp32_only():
    module = types.ModuleType("fake_utils")

    def convert_to_torch_dtype(param_dtype):
        if param_dtype == "bf16":
            return torch.bfloat16
        raise ValueError(f"Invalid param_dtype: {param_dtype}")

    module.convert_to_torch_dtype = convert_to_torch_dtype
    patches.fp32_torch_dtype(module)
    first = module.convert_to_torch_dtype
    patches.fp32_torch_dtype(module)  # idempotent
    assert module.convert_to_torch_dtype is first
    assert module.convert_to_torch_dtype("fp32") is torch.float32
    assert module.convert_to_torch_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="Invalid"):
        module.convert_to_torch_dtype("fp8")


def _fake_vllm_engine_module(seen):
    """A twin of openrlhf.trainer.ray.vllm_engine: a @ray.remote rollout actor that builds vLLM engine args."""
    ray = pytest.importorskip("ray")
    module = types.ModuleType("fake_vllm_engine")
    vllm = SimpleNamespace(AsyncEngineArgs=lambda *args, **kwargs: seen.append(kwargs))

    class RolloutRayActor:
        async def __init__(self, *args, **kwargs):
            self.kwargs = kwargs
            engine_args = vllm.AsyncEngineArgs(*args, **self.kwargs)  # noqa: F841 (the call site the patch pins)

    def create_vllm_engines():
        return {"dtype": "bfloat16"}

    module.RolloutRayActor = ray.remote(RolloutRayActor)
    module.create_vllm_engines = create_vllm_engines
    return module


@pytest.mark.parametrize("choice, engine_dtype", [("fp32", "float32"), ("bf16", "bfloat16")])
def test_vllm_engine_dtype_follows_the_choice(monkeypatch, choice, engine_dtype):
    import asyncio

    seen = []
    module = _fake_vllm_engine_module(seen)
    patches.vllm_engine_kwargs(module)
    actor_cls = module.RolloutRayActor.__ray_metadata__.modified_class
    first = actor_cls.__init__
    patches.vllm_engine_kwargs(module)  # idempotent
    assert actor_cls.__init__ is first
    monkeypatch.setenv("MRTPO_CPU_DTYPE", choice)
    monkeypatch.delenv("MRTPO_CPU_KV_CACHE_MB", raising=False)
    asyncio.run(actor_cls.__init__(actor_cls.__new__(actor_cls), model="m", dtype="bfloat16", enable_sleep_mode=True))
    # vLLM's config refuses sleep mode on CPU; the actor's sleep calls still reach the CPU worker
    assert seen == [{"model": "m", "dtype": engine_dtype, "enable_sleep_mode": False}]


@pytest.mark.parametrize(
    "mb, vllm_gib, want", [("512", None, 512 * 2**20), ("96", None, 96 * 2**20), ("512", "2", None), ("", None, None)]
)
def test_vllm_kv_cache_is_sized_in_mib_unless_vllms_own_switch_is_set(monkeypatch, mb, vllm_gib, want):
    import asyncio

    seen = []
    module = _fake_vllm_engine_module(seen)
    patches.vllm_engine_kwargs(module)
    actor_cls = module.RolloutRayActor.__ray_metadata__.modified_class
    monkeypatch.setenv("MRTPO_CPU_KV_CACHE_MB", mb)
    if vllm_gib is None:
        monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    else:
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", vllm_gib)
    asyncio.run(actor_cls.__init__(actor_cls.__new__(actor_cls), model="m", dtype="bfloat16"))
    assert seen[0].get("kv_cache_memory_bytes") == want


def test_vllm_cpu_takes_the_kv_cache_size_from_the_engine_args():
    """The contract the KV-cache sizing relies on: the engine argument exists, and vLLM's CPU platform replaces it
    only when its own VLLM_CPU_KVCACHE_SPACE is set."""
    pytest.importorskip("vllm")
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import cpu

    assert "kv_cache_memory_bytes" in {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    source = inspect.getsource(cpu)
    assert 'if env_key in os.environ and os.environ[env_key] != ""' in source
    assert "cache_config.kv_cache_memory_bytes = kv_cache_space * GiB_bytes" in source


def test_vllm_engine_patch_fails_loudly_without_the_hard_coded_dtype():
    module = _fake_vllm_engine_module([])
    module.create_vllm_engines = lambda: {"dtype": "auto"}
    with pytest.raises(patches.UpstreamChanged, match="dtype"):
        patches.vllm_engine_kwargs(module)


# ---------------------------------------------------------------- flash_attn stub


def test_flash_attn_stub_roundtrip():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    values, indices, cu_seqlens, max_len, seqlens = unpad_input(hidden, mask)
    assert values.shape == (5, 3) and cu_seqlens.tolist() == [0, 3, 5] and max_len == 3
    assert seqlens.tolist() == [3, 2]
    assert torch.equal(index_first_axis(hidden.view(8, 3), indices), values)
    back = pad_input(values, indices, 2, 4)
    assert torch.equal(back, hidden * mask.unsqueeze(-1))


def test_flash_attn_stub_serves_only_the_needed_modules():
    out = run_python(
        """
        import importlib
        import openrlhf.models.ring_attn_utils as r
        print(r.unpad_input.__module__)
        try:
            importlib.import_module("flash_attn.ops.triton.cross_entropy")
        except ImportError:
            print("no-ops")
        """,
        {"MRTPO_CPU": "1"},
    )
    assert out.split()[-2:] == ["mrtpo_openrlhf.cpu.flash_attn_stub", "no-ops"]


# ---------------------------------------------------------------- gloo weight sync


GLOO_RANK = """
import json, os, sys, torch
from mrtpo_openrlhf.cpu.gloo_sync import GlooWeightSyncGroup
port, rank = int(sys.argv[1]), int(sys.argv[2])
group = GlooWeightSyncGroup("127.0.0.1", port, rank, 2)
sent = torch.arange(12, dtype=torch.bfloat16).view(3, 4)
plain = sent.clone() if rank == 0 else torch.zeros(3, 4, dtype=torch.bfloat16)
strided = (sent + 1).t().contiguous().t() if rank == 0 else torch.zeros(4, 3, dtype=torch.bfloat16).t()
group.broadcast(plain, src=0, stream=None)
group.broadcast(strided, src=0)  # a non-contiguous view on the receiving side
group.close()
print(json.dumps([plain.float().tolist(), strided.float().tolist()]), flush=True)
# skip interpreter teardown: under load a rank still aborted there once, after its work was done and the group
# closed ("terminate called without an active exception": a native thread, of gloo or of the rendezvous store,
# still joinable in a destructor); training processes never exit that way (the launcher stops them)
os._exit(0)
"""


def test_gloo_group_moves_bf16_bytes():
    """Two separate processes (rank 0 sends, rank 1 receives) over the stateless gloo group."""
    pytest.importorskip("vllm.distributed.utils")
    from mrtpo_openrlhf.ports import free_port

    port = str(free_port())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", GLOO_RANK, port, str(rank)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [proc.communicate(timeout=120) for proc in ranks]
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, err) in zip(ranks, outputs):
        assert proc.returncode == 0, err[-2000:]
    expected = torch.arange(12, dtype=torch.float32).view(3, 4)
    received, strided = json.loads(outputs[1][0].strip().splitlines()[-1])
    assert received == expected.tolist()
    assert strided == (expected + 1).tolist()


def test_gloo_group_rejects_non_cpu_tensor():
    group = GlooWeightSyncGroup.__new__(GlooWeightSyncGroup)
    with pytest.raises(ValueError, match="CPU"):
        group.broadcast(torch.zeros(1, device="meta"), 0)


# ---------------------------------------------------------------- vLLM worker update_weight


class _Runner:
    def __init__(self, model):
        self.model, self.reloaded = model, []

    def get_model(self):
        return self.model

    def reload_weights(self, weights_iterator):
        self.reloaded.append(list(weights_iterator))


class _Group:
    def __init__(self, values):
        self.values = list(values)

    def broadcast(self, tensor, src, stream=None):
        tensor.copy_(self.values.pop(0))


def test_update_weight_collects_a_round_then_reloads_and_refreshes(monkeypatch):
    vocab = pytest.importorskip("vllm.model_executor.layers.vocab_parallel_embedding")
    import openrlhf.trainer.ray.vllm_worker_wrap as ww

    patches.apply()
    patches.vllm_worker_update_weight(ww)
    refreshed = []
    monkeypatch.setattr(
        vocab.UnquantizedEmbeddingMethod, "process_weights_after_loading", lambda self, layer: refreshed.append(layer)
    )
    embed = torch.nn.Module()
    embed.quant_method = vocab.UnquantizedEmbeddingMethod()
    model = torch.nn.Sequential(embed, torch.nn.Linear(2, 2))

    worker = ww.WorkerWrap()
    worker.model_config = SimpleNamespace(dtype=torch.bfloat16)
    worker.device = torch.device("cpu")
    worker.model_runner = _Runner(model)
    worker._model_update_with_ray = False
    worker._model_update_group = _Group([torch.ones(2), torch.full((2, 2), 3.0)])

    worker.update_weight("a", torch.bfloat16, (2,), empty_cache=False)
    assert worker.model_runner.reloaded == []  # nothing loaded mid-round
    worker.update_weight("b", torch.bfloat16, (2, 2), empty_cache=True)
    (loaded,) = worker.model_runner.reloaded
    assert [name for name, _ in loaded] == ["a", "b"] and loaded[1][1].sum().item() == 12.0
    assert refreshed == [embed]

    with pytest.raises(ValueError, match="dtype mismatch.*MRTPO_CPU_DTYPE"):
        worker.update_weight("c", torch.float32, (1,))

    monkeypatch.setenv("MRTPO_CPU_SKIP_WEIGHT_SYNC", "1")  # negative control: received, not loaded
    worker._model_update_group = _Group([torch.ones(1)])
    worker.update_weight("d", torch.bfloat16, (1,), empty_cache=True)
    assert len(worker.model_runner.reloaded) == 1 and worker._model_update_group.values == []


class _ForgetfulRunner(_Runner):
    """Loads like vLLM's loader (copies each tensor, keeps no reference) and records which received tensors were
    still alive when the next one was asked for."""

    def reload_weights(self, weights_iterator):
        import weakref

        self.alive_at_next, previous = [], None
        for name, tensor in weights_iterator:
            self.alive_at_next.append(previous is not None and previous() is not None)
            previous = weakref.ref(tensor)
            del tensor
        self.reloaded.append(name)


def test_update_weight_drops_each_tensor_once_loaded_and_records_the_round(monkeypatch, tmp_path):
    """The round is not held whole while vLLM loads it: a loaded tensor is freed before the next one is asked for;
    the sync record still counts every tensor and checks the embedding against what was sent."""
    pytest.importorskip("vllm.model_executor.layers.vocab_parallel_embedding")

    import openrlhf.trainer.ray.vllm_worker_wrap as ww

    patches.apply()
    patches.vllm_worker_update_weight(ww)
    monkeypatch.setenv("MRTPO_CPU_WEIGHT_SYNC_JSONL", str(tmp_path / "sync.jsonl"))
    trimmed = []
    monkeypatch.setattr(patches, "release_freed_heap", lambda: trimmed.append(1) or True)
    embed = torch.nn.Embedding(3, 2)
    model = torch.nn.Module()
    model.embed_tokens = embed
    sent = [torch.full((2,), 1.0), torch.full((2, 2), 2.0), torch.full((3, 2), 5.0)]
    worker = ww.WorkerWrap()
    worker.model_config = SimpleNamespace(dtype=torch.float32)
    worker.device = torch.device("cpu")
    worker.model_runner = _ForgetfulRunner(model)
    worker._model_update_with_ray = False
    worker._model_update_group = _Group(sent)
    with torch.no_grad():
        embed.weight.copy_(sent[2])  # the sampler holds what was sent: the check must match
    for i, (name, shape) in enumerate([("a", (2,)), ("b", (2, 2)), ("embed_tokens.weight", (3, 2))]):
        worker.update_weight(name, torch.float32, shape, empty_cache=i == 2)
    assert worker.model_runner.alive_at_next == [False, False, False]
    assert worker.model_runner.reloaded == ["embed_tokens.weight"] and trimmed == [1]
    (line,) = [json.loads(x) for x in (tmp_path / "sync.jsonl").read_text().splitlines()]
    assert line["tensors"] == 3 and line["checked"] == "embed_tokens.weight" and line["match"] is True

    monkeypatch.setenv("MRTPO_CPU_VLLM_TRIM", "0")
    worker._model_update_group = _Group([torch.ones(1)])
    worker.update_weight("a", torch.float32, (1,), empty_cache=True)
    assert trimmed == [1]  # switched off


def test_release_freed_heap_returns_memory_to_the_system():
    """Freed heap chunks below the mmap threshold stay in the process until malloc_trim gives them back."""
    import ctypes

    if not hasattr(ctypes.CDLL(None), "malloc_trim"):
        pytest.skip("no glibc malloc_trim here")
    code = """
import os
from mrtpo_openrlhf.cpu import patches
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
chunks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MiB in heap chunks
keep = bytearray(64 * 1024)  # above them, so the heap's top cannot shrink by itself
del chunks
before = rss()
print(patches.release_freed_heap(), round(before - rss()))
"""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**40)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    returned, freed_mib = out.split()
    assert returned == "True" and int(freed_mib) > 200, out


def test_update_weight_round_in_fp32():
    """An fp32 engine (MRTPO_CPU_DTYPE=fp32) receives fp32 tensors bit-exactly; a bf16 sender is refused."""
    pytest.importorskip("vllm.model_executor.layers.vocab_parallel_embedding")
    import openrlhf.trainer.ray.vllm_worker_wrap as ww

    patches.apply()
    patches.vllm_worker_update_weight(ww)
    sent = torch.tensor([1.0 + 2**-20, -3.25e-7, 7.0])  # not representable in bf16
    worker = ww.WorkerWrap()
    worker.model_config = SimpleNamespace(dtype=torch.float32)
    worker.device = torch.device("cpu")
    worker.model_runner = _Runner(torch.nn.Linear(1, 1))
    worker._model_update_with_ray = False
    worker._model_update_group = _Group([sent])
    worker.update_weight("w", torch.float32, (3,), empty_cache=True)
    ((name, received),) = worker.model_runner.reloaded[0]
    assert name == "w" and received.dtype == torch.float32 and torch.equal(received, sent)
    with pytest.raises(ValueError, match="trainer sends torch.bfloat16, vLLM holds torch.float32"):
        worker.update_weight("w", torch.bfloat16, (3,))


def test_vllm_core_in_actor_survives_rays_pickling_and_can_be_turned_off():
    # Ray pickles the rollout actor's patched __init__ by value, with the module's `vllm` among its globals
    out = run_python(
        """
        import ray.cloudpickle as cloudpickle
        import vllm
        import openrlhf.trainer.ray.vllm_engine as ve
        from mrtpo_openrlhf.cpu.vllm_in_actor import InActorEngine
        back = cloudpickle.loads(cloudpickle.dumps(ve.vllm))
        print(back.AsyncLLMEngine is InActorEngine, back.AsyncEngineArgs is vllm.AsyncEngineArgs,
              back.__version__ == vllm.__version__)
        """,
        {"MRTPO_CPU": "1"},
    )
    assert out.split()[-3:] == ["True"] * 3
    off = run_python(
        "import vllm, openrlhf.trainer.ray.vllm_engine as ve\n"
        "print(ve.vllm is vllm, ve.vllm.AsyncLLMEngine is vllm.AsyncLLMEngine)",
        {"MRTPO_CPU": "1", "MRTPO_CPU_VLLM_CORE_IN_ACTOR": "0"},
    )
    assert off.split()[-2:] == ["True", "True"]
