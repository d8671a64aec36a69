"""Post-import hooks: run a callback right after a named module has finished executing.

The CPU patches must reach modules that are imported late (inside Ray workers, inside vLLM's engine
process, inside functions), and importing torch/openrlhf/vllm eagerly from ``sitecustomize`` would slow
down every Python process Ray starts. So each patch is registered against the module it changes and runs
the moment that module is imported, or at once when it already is.

Only the standard import system is touched: a meta-path finder that asks the other finders for the
spec and wraps the loader so that ``exec_module`` is followed by the callbacks. The original loader is
put back on the module afterwards, so ``inspect.getsource`` and ``importlib.resources`` behave as usual.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Callable, Dict, List

Callback = Callable[[ModuleType], None]

_lock = threading.RLock()
_pending: Dict[str, List[Callback]] = {}


def when_imported(module_name: str, callback: Callback) -> None:
    """Run ``callback(module)`` once ``module_name`` is imported (now, if it already is).

    Args:
        module_name: dotted module name, e.g. ``"openrlhf.utils.distributed_util"``.
        callback: called with the fully executed module object; exceptions propagate to the importer,
            so a patch whose upstream call site vanished fails the import loudly.
    """
    with _lock:
        module = sys.modules.get(module_name)
        if module is None or _is_initialising(module):
            _pending.setdefault(module_name, []).append(callback)
            _install_finder()
            return
    callback(module)


def pending_modules() -> List[str]:
    """Names of modules that still have callbacks waiting for their import."""
    with _lock:
        return sorted(_pending)


def _is_initialising(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(spec is not None and getattr(spec, "_initializing", False))


def _install_finder() -> None:
    if not any(isinstance(finder, _PostImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader other finders return for a watched module."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname  # ask the *other* finders without recursing into ourselves
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is None:
                for finder in sys.meta_path:
                    if finder is self or not hasattr(finder, "find_spec"):
                        continue
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PostImportLoader(spec.loader)
        return spec


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, wrapped) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._wrapped, name)

    def create_module(self, spec):
        return self._wrapped.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = self._wrapped
        module.__loader__ = self._wrapped
        self._wrapped.exec_module(module)
        with _lock:
            callbacks = _pending.pop(module.__name__, [])
        for callback in callbacks:
            callback(module)
