"""The trainer-in-the-driver stand-in (``cpu/in_process.py``) behaves as a real Ray actor does for what upstream's
``train()`` uses: construction, ``handle.method.remote``, a copy of the arguments, resolved ``ObjectRef``
arguments, an ``ObjectRef`` back. The reference is Ray itself: the same class as a real actor."""

import importlib
import importlib.util
import sys

import pytest
import ray

from mrtpo_openrlhf.cpu.in_process import InProcessActor, InProcessHandle, trainer_in_driver


class Args:
    def __init__(self):
        self.eval_steps = -1


class Trainer:
    def __init__(self, args, scale=1):
        args.eval_steps = float("inf")  # upstream's PPOTrainer does this to its strategy's args
        self.args = args
        self.scale = scale

    def get_max_steps(self):
        return 7 * self.scale

    def add(self, items, extra=0):
        items.append("seen")
        return sum(x for x in items if isinstance(x, int)) + extra

    def fail(self):
        raise ValueError("step 3: rank 1 ran out of memory")


@pytest.fixture(scope="module")
def local_ray():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the real actor's worker cannot import tests
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("make", [lambda: ray.remote(num_cpus=0)(Trainer), lambda: InProcessActor(Trainer)])
def test_behaves_as_a_ray_actor(local_ray, make):
    actor_class = make()
    args = Args()
    handle = actor_class.options(num_cpus=0).remote(args, scale=ray.put(2))
    assert args.eval_steps == -1  # the actor changed its own copy
    ref = handle.get_max_steps.remote()
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == 14

    items = [1, 2]
    assert ray.get(handle.add.remote(items, extra=ray.put(10))) == 13
    assert items == [1, 2]  # a copy, not the caller's list

    with pytest.raises(ValueError, match="rank 1 ran out of memory"):
        ray.get(handle.fail.remote())


def test_private_names_are_not_methods(local_ray):
    handle = InProcessActor(Trainer).remote(Args())
    assert isinstance(handle, InProcessHandle) and isinstance(handle.instance, Trainer)
    with pytest.raises(AttributeError):
        handle._secret


@pytest.mark.parametrize(
    "value,on", [(None, True), ("1", True), ("yes", True), ("0", False), ("off", False), ("FALSE", False)]
)
def test_switch(value, on):
    assert trainer_in_driver({} if value is None else {"MRTPO_CPU_TRAINER_IN_DRIVER": value}) is on


@pytest.mark.parametrize("cpu,switch,in_driver", [("1", None, True), ("1", "0", False), (None, None, False)])
def test_cli_places_the_trainer(monkeypatch, cpu, switch, in_driver):
    for name, value in (("MRTPO_CPU", cpu), ("MRTPO_CPU_TRAINER_IN_DRIVER", switch)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    if importlib.util.find_spec("flash_attn") is None:  # openrlhf.models imports it (as tests/adapter/conftest.py)
        from mrtpo_openrlhf.cpu import flash_attn_stub

        flash_attn_stub.install()
    ppo_trainer = importlib.import_module("openrlhf.trainer.ppo_trainer")
    from mrtpo_openrlhf.adapter.trainer import MRTPOPPOTrainer, MRTPOPPOTrainerBase
    from mrtpo_openrlhf.cli.train_ppo_ray import install_upstream_overrides

    ppo_actor = importlib.import_module("openrlhf.trainer.ray.ppo_actor")
    launcher = importlib.import_module("openrlhf.trainer.ray.launcher")
    # the module globals install_upstream_overrides rebinds, each put back after the test
    monkeypatch.setattr(ppo_trainer, "PPOTrainer", ppo_trainer.PPOTrainer)
    monkeypatch.setattr(ppo_actor, "PolicyModelActor", ppo_actor.PolicyModelActor)
    monkeypatch.setattr(launcher, "ReferenceModelActor", launcher.ReferenceModelActor)
    install_upstream_overrides()
    placed = ppo_trainer.PPOTrainer
    if in_driver:
        assert isinstance(placed, InProcessActor) and placed.cls is MRTPOPPOTrainerBase
    else:
        assert placed is MRTPOPPOTrainer
