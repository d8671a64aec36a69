"""MRTPO on OpenRLHF 0.11.2: reward-specific token-level credit assignment for multi-reward RL.

``core`` (pure torch math) -> ``rewards``/``verifiers`` (reward vectors + verifier blocks) -> ``adapter``
(OpenRLHF experience maker, actor replay, trainer) -> ``cli`` (training entry point). ``cpu`` and ``launch``
run the same path on a CPU machine; ``evaluation`` and ``diagnostics`` read the results. ``tasks`` declares each
task (reward module, data, prompt builder, benchmarks, diagnostic spans, CPU defaults) once; all of these read it.
"""

import warnings

# torch imports pynvml (installed by upstream's requirements), which warns it is deprecated on every import: once
# per process, three times in a reward server's log. Nothing here calls pynvml; the warning says nothing to act on.
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

__version__ = "0.1.0"
