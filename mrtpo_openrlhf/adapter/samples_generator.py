"""Rollout side: upstream's SamplesGenerator plus the reward-vector transport and generation timing."""
from __future__ import annotations

import time

from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from .transport import attach_reward_vector, split_extra_logs


class MRTPOSamplesGenerator(SamplesGenerator):
    last_generation_time: float = 0.0

    def _process_response_into_experience(self, response, **generate_kwargs):
        safe_logs, ours = split_extra_logs(response.get("extra_logs"))
        response = {**response, "extra_logs": safe_logs}
        experience = super()._process_response_into_experience(response, **generate_kwargs)
        attach_reward_vector(experience, ours, response.get("reward"))
        return experience

    def generate_samples(self, **generate_kwargs):
        t0 = time.time()
        out = super().generate_samples(**generate_kwargs)
        self.last_generation_time = time.time() - t0
        return out
