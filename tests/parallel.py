"""How the suite spreads over pytest-xdist workers (``scripts/test.sh`` runs ``-n 2 --dist loadgroup``).

The slow tests start Ray clusters, DeepSpeed process groups and vLLM engines, and several time their own milestones:
they are one group, run one at a time on one worker, in file order, and first: they are the suite's critical path
(about four fifths of its time on 2 cores). Every other test module is a group of its own (its module fixtures are
built once) and runs on the other workers at the lowest CPU priority: Ray runs its workers at nice 15, so a light test
at nice 0 would take the CPU from the cluster tests instead of filling the gaps they leave. A worker lowers its
priority for good at its first light test, so the serial group must be the first work its worker gets: it is put at
the head of the collection, and xdist's reordering of groups by size (which put it behind every larger module) is
turned off.

Without xdist (plain ``pytest``, ``-p no:xdist`` or ``-n 0``) nothing changes: no group, no priority change.
"""

from __future__ import annotations

import os

import pip_resolver
import pytest

SERIAL = "serial"
START_NICE_ENV = "PARALLEL_SUITE_START_NICE"  # the session's priority, for the workers to compare theirs with
# waits on the network for minutes with an idle CPU: it would hold the serial worker for nothing
NOT_SERIAL = {pip_resolver.TEST_NAME}


def group_of(item: pytest.Item) -> str:
    if item.get_closest_marker("slow") and item.originalname not in NOT_SERIAL:
        return SERIAL
    return item.nodeid.split("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "dist", "no") == "loadgroup":  # the controller: it orders the groups
        config.option.loadscopereorder = False
        os.environ[START_NICE_ENV] = str(os.nice(0))  # the workers it starts inherit it


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    if getattr(config.option, "loadgroup", False):  # a worker: every worker sorts the same collection the same way
        items.sort(key=lambda item: group_of(item) != SERIAL)  # stable: file order inside each part


def under_xdist() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if under_xdist() and group_of(item) != SERIAL and os.nice(0) < 19:
        os.nice(19 - os.nice(0))  # for the rest of this worker's life: it only ever gets light modules after this
