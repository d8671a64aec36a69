"""Trainer side: upstream's PPOTrainer with our samples generator, experience maker and metrics."""

from __future__ import annotations

import os
import socket
import time

import ray
import torch
from openrlhf.trainer.ppo_trainer import PPOTrainer

from ..metrics import append_step, continue_at
from ..provenance import record_run
from .experience_maker import MRTPOExperienceMaker
from .samples_generator import MRTPOSamplesGenerator


def seed_prompt_order(dataloader, seed: int) -> bool:
    """Make the prompt order a function of ``seed`` alone; True when the loader's sampler was reseeded.

    Upstream's trainer actor has no torch.distributed group, so its prompts loader shuffles with a sampler whose
    generator is seeded at random: two runs with one ``--train.seed`` saw different prompts. Every arm of a
    study must see the same prompts in the same order for a seed.
    """
    sampler = getattr(dataloader, "sampler", None)
    if sampler is None or not hasattr(sampler, "generator"):
        return False
    sampler.generator = torch.Generator().manual_seed(int(seed))
    return True


class MRTPOPPOTrainerBase(PPOTrainer.__ray_actor_class__):
    """Ray workers import upstream fresh, so the trainer builds our components itself."""

    def __init__(
        self,
        pretrain,
        strategy,
        actor_model_group,
        critic_model_group,
        reward_model_group,
        reference_model_group,
        vllm_engines,
        **generate_kwargs,
    ):
        super().__init__(
            pretrain,
            strategy,
            actor_model_group,
            critic_model_group,
            reward_model_group,
            reference_model_group,
            vllm_engines,
            **generate_kwargs,
        )
        seed_prompt_order(self.prompts_dataloader, strategy.args.train.seed)
        tokenizer = self.samples_generator.tokenizer
        self.samples_generator = MRTPOSamplesGenerator(
            strategy=strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=tokenizer,
            vllm_engines=vllm_engines,
        )
        self.experience_maker = MRTPOExperienceMaker(
            actor_model_group,
            critic_model_group,
            reward_model_group,
            reference_model_group,
            self.kl_ctl,
            strategy,
            tokenizer,
        )

    writes_metrics_jsonl = True  # the CPU layer's metrics patch stands aside for this trainer

    def train_step(self, rollout_samples, global_step):
        self.experience_maker.global_step = global_step
        t0 = time.time()
        status, next_step = super().train_step(rollout_samples, global_step)
        step_time = time.time() - t0 + self.samples_generator.last_generation_time
        metrics = self.experience_maker.pop_metrics()
        if "mrtpo/replay_time" in metrics:
            metrics["mrtpo/replay_share_of_step"] = metrics["mrtpo/replay_time"] / max(step_time, 1e-9)
        metrics["timing/step_wall"] = step_time
        status.update(metrics)
        return status, next_step

    def init_checkpoint_states(self):
        """Upstream's resume state; the metrics file continues at the checkpoint's step (0 for a fresh start): rows of
        later steps, logged before the interruption and logged again by this run, are moved aside, never deleted."""
        states = super().init_checkpoint_states()
        path = os.environ.get("MRTPO_METRICS_JSONL")
        step = states["global_step"]
        if not path:
            return states
        print(f"[mrtpo] metrics: {os.path.abspath(path)} (on {socket.gethostname()}, the trainer's node)", flush=True)
        record_run(os.path.dirname(os.path.abspath(path)))
        moved, aside = continue_at(path, step)
        if step > 0:
            print(
                f"[mrtpo] resuming at step {step} ({states['total_consumed_prompts']} prompts consumed); metrics "
                f"continue in {path}",
                flush=True,
            )
        if moved:
            why = f"after the checkpoint's step {step}" if step else "of a run without a checkpoint to resume from"
            print(f"[mrtpo] {moved} logged rows {why} moved to {aside} (this run logs those steps again)", flush=True)
        return states

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        """Also append the step's numeric metrics to $MRTPO_METRICS_JSONL (one JSON line per logged step)."""
        path = os.environ.get("MRTPO_METRICS_JSONL")
        if path and logs_dict and global_step % self.args.logger.logging_steps == 0:
            append_step(path, global_step, logs_dict)
        return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)


MRTPOPPOTrainer = ray.remote(MRTPOPPOTrainerBase)
