"""Launch OpenRLHF-style Ray CLIs on CPU (private Ray head, CPU patch layer in every process)."""

from .recipes import cpu_grpo_args, write_prompt_jsonl
from .runner import RayHead, RunResult, cpu_env, run_openrlhf_cpu, start_ray_head, stop_processes

__all__ = [
    "RayHead",
    "RunResult",
    "cpu_env",
    "cpu_grpo_args",
    "run_openrlhf_cpu",
    "start_ray_head",
    "stop_processes",
    "write_prompt_jsonl",
]
