"""Rollout side: upstream's SamplesGenerator plus the reward-vector transport and generation timing."""

from __future__ import annotations

import logging
import time

from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from .transport import (
    RewardSetupError,
    attach_reward_vector,
    fill_missing_logs,
    raise_setup_error,
    scalar,
    split_extra_logs,
)

logger = logging.getLogger(__name__)


class MRTPOSamplesGenerator(SamplesGenerator):
    last_generation_time: float = 0.0

    def _process_response_into_experience(self, response, **generate_kwargs):
        safe_logs, ours = split_extra_logs(response.get("extra_logs"))
        raise_setup_error(ours)  # training on the zeros of a reward that could not run would be silent
        if response.get("reward") is None and getattr(getattr(self.args, "reward", None), "remote_url", None):
            # upstream logs a failed reward call ("Failed to fetch reward from remote RM") and goes on without one
            raise RewardSetupError(
                "no reward for a response: the reward function or server failed (a server's non-200 answer, e.g. "
                "500 'reward setup error: ...'; its reason is in the server's log and upstream's log line above)"
            )
        # the HTTP reward server answers JSON lists ([x] per response); upstream would make (1, 1) rewards of them
        response = {
            **response,
            "extra_logs": safe_logs,
            "reward": scalar(response.get("reward")),
            "scores": scalar(response.get("scores")),
        }
        experience = super()._process_response_into_experience(response, **generate_kwargs)
        attach_reward_vector(experience, ours, response.get("reward"))
        return experience

    def generate_samples(self, **generate_kwargs):
        t0 = time.time()
        out = super().generate_samples(**generate_kwargs)
        self.last_generation_time = time.time() - t0
        filled = fill_missing_logs(out[0])
        if filled:
            logger.warning("numeric reward logs missing for some responses (verifier failures?), set to 0: %s", filled)
        return out
