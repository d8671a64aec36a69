"""MRTPO on OpenRLHF 0.11.2: reward-specific token-level credit assignment for multi-reward RL.

``core`` (pure torch math) -> ``rewards``/``verifiers`` (reward vectors + verifier blocks) -> ``adapter``
(OpenRLHF experience maker, actor replay, trainer) -> ``cli`` (training entry point). ``cpu`` and ``launch``
run the same path on a CPU machine; ``evaluation`` and ``diagnostics`` read the results. ``tasks`` declares each
task (reward module, data, prompt builder, benchmarks, diagnostic spans, CPU defaults) once; all of these read it.
"""

__version__ = "0.1.0"
