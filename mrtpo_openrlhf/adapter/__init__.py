"""Thin adapter over OpenRLHF 0.11.2: subclasses and hooks, no copied upstream code.

Stages, in the order a training step runs them:
- ``args``: the ``--algo.mrtpo.*`` flags, the ``gdpo``/``mrtpo`` estimators, validation.
- ``transport``: the per-reward vector and verifier blocks ride from the reward function to the
  experience maker (popped from ``extra_logs`` before upstream sees them).
- ``experience_maker``: per-reward GDPO advantages, replay on the actor group, token advantages.
- ``actor``: the actor method that runs the replay on the DeepSpeed engine.
- ``trainer``: wires the above into upstream's PPOTrainer and adds the per-step metrics.
"""
