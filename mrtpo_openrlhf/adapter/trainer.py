"""Trainer side: upstream's PPOTrainer with our samples generator, experience maker and metrics."""
from __future__ import annotations

import json
import os
import time

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from .experience_maker import MRTPOExperienceMaker
from .samples_generator import MRTPOSamplesGenerator


class MRTPOPPOTrainerBase(PPOTrainer.__ray_actor_class__):
    """Ray workers import upstream fresh, so the trainer builds our components itself."""

    def __init__(self, pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                 reference_model_group, vllm_engines, **generate_kwargs):
        super().__init__(pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                         reference_model_group, vllm_engines, **generate_kwargs)
        tokenizer = self.samples_generator.tokenizer
        self.samples_generator = MRTPOSamplesGenerator(
            strategy=strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=tokenizer,
            vllm_engines=vllm_engines,
        )
        self.experience_maker = MRTPOExperienceMaker(
            actor_model_group, critic_model_group, reward_model_group, reference_model_group,
            self.kl_ctl, strategy, tokenizer,
        )
        self.metrics_path = os.environ.get("MRTPO_METRICS_JSONL") or None

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
        self._append_metrics(next_step, status)
        return status, next_step

    def _append_metrics(self, step: int, status: dict) -> None:
        """One JSON line per step (numbers only) when MRTPO_METRICS_JSONL names a file."""
        if not self.metrics_path:
            return
        row = {"step": step}
        for key, value in status.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = float(value)
        os.makedirs(os.path.dirname(os.path.abspath(self.metrics_path)), exist_ok=True)
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


MRTPOPPOTrainer = ray.remote(MRTPOPPOTrainerBase)
