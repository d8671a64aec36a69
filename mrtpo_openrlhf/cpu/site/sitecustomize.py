"""Imported by Python at start-up when this folder is on PYTHONPATH (the MRTPO CPU launcher puts it there).

With MRTPO_CPU on (``mrtpo_openrlhf.env_flags``: 1/true/yes/on) it registers the CPU patches (lazily: nothing
heavy is imported here), then hands over to
any other ``sitecustomize`` further down ``sys.path`` so it is not shadowed.
"""

import os
import sys


def _chain_next_sitecustomize():
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and os.path.abspath(spec.origin or "") != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    from mrtpo_openrlhf.env_flags import cpu_layer_on as _cpu_layer_on
except ImportError as _err:  # the package itself is not importable in this interpreter
    if os.environ.get("MRTPO_CPU"):
        sys.stderr.write(f"[mrtpo.cpu] MRTPO_CPU is set but mrtpo_openrlhf cannot be imported: {_err}\n")
else:
    if _cpu_layer_on():
        try:
            from mrtpo_openrlhf.cpu.patches import apply as _apply
        except ImportError as _err:
            sys.stderr.write(f"[mrtpo.cpu] MRTPO_CPU is on but the CPU patches cannot be imported: {_err}\n")
        else:
            _apply()
        if os.environ.get("MRTPO_CPU_PEAK_STACKS"):
            from mrtpo_openrlhf.cpu.peak_stack import start_from_env as _start_peak_stacks

            _start_peak_stacks()

_chain_next_sitecustomize()
