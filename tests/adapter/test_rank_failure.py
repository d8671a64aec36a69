"""One failing actor rank fails the step at once (adapter/ranks.py), with real Ray actors and no model.

A tiny private Ray (2 CPUs, 100 MB object store, no dashboard) holds two actors: one raises (or dies), the other
blocks forever, as a ZeRO-3 rank does in an all-gather that waits for the failed one. The wait must name the failed
rank and its exception within seconds (not the collective's hour), and kill the blocked rank.
"""

import os
import shutil
import tempfile
import time

import pytest
import ray
from openrlhf_fakes import fake_actor

from mrtpo_openrlhf.adapter.ranks import INJECT_ENV, RankFailed, get_ranks, inject_replay_failure

pytestmark = pytest.mark.timeout(180)
# Far above a healthy wait (well under a second here), far below a collective's timeout (30-60 minutes).
PROMPT_S = 30.0
GCS_CONNECT_ENV = "RAY_gcs_rpc_server_connect_timeout_s"


@pytest.fixture(scope="module")
def tiny_ray():
    temp = tempfile.mkdtemp(prefix="rayff", dir="/tmp")  # short: Ray's socket paths have a length limit
    # the driver's deadline for reaching the GCS it just started: missed once on a 2-core machine busy with a study
    # ("Failed to connect to GCS" at setup); Ray reads RAY_<setting> when ray.init configures this process
    saved = os.environ.get(GCS_CONNECT_ENV)
    os.environ[GCS_CONNECT_ENV] = "60"
    ray.init(
        address="local", num_cpus=2, object_store_memory=100_000_000, include_dashboard=False, _temp_dir=temp,
        log_to_driver=False,
    )  # fmt: skip

    class Rank:  # defined here: pickled by value, so a worker needs nothing from the test folder
        def __init__(self, rank):
            self.rank = rank

        def work(self, fail_rank, mode="raise", delay=0.0):
            time.sleep(delay)
            if self.rank != fail_rank:
                if fail_rank is None:
                    return f"q of rank {self.rank}"
                import threading

                threading.Event().wait()  # stands for a gather that waits for the failed rank
            if mode == "die":
                os._exit(1)  # the process ends, as under the OOM killer
            raise MemoryError(f"out of memory in the replay on rank {self.rank}")

        def ping(self):
            return self.rank

        def execute_batch(self, method_name, all_data, start_idx, end_idx):  # upstream's signature (pinned)
            return self.rank, method_name, all_data

    yield ray.remote(num_cpus=0)(Rank)  # 0: the actors of one test never wait for a CPU
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    if saved is None:
        os.environ.pop(GCS_CONNECT_ENV, None)
    else:
        os.environ[GCS_CONNECT_ENV] = saved


@pytest.fixture
def ranks(tiny_ray):
    """``ranks(n)``: n started actors, rank i at index i; all killed after the test."""
    started = []

    def start(n=2):
        actors = [tiny_ray.remote(r) for r in range(n)]
        assert ray.get([a.ping.remote() for a in actors]) == list(range(n))
        started.extend(actors)
        return actors

    yield start
    for actor in started:
        ray.kill(actor, no_restart=True)


def test_results_in_rank_order_whichever_finishes_first(ranks):
    actors = ranks()
    refs = [actors[0].work.remote(None, delay=0.5), actors[1].work.remote(None)]
    assert get_ranks(refs, actors, "the replay") == ["q of rank 0", "q of rank 1"]


@pytest.mark.parametrize("mode", ["raise", "die"])
def test_first_failing_rank_is_named_at_once_and_the_blocked_rank_killed(ranks, mode):
    actors = ranks()
    t0 = time.monotonic()
    refs = [actor.work.remote(1, mode) for actor in actors]
    with pytest.raises(RankFailed) as info:
        get_ranks(refs, actors, "the MRTPO replay")
    elapsed = time.monotonic() - t0
    assert elapsed < PROMPT_S, f"the failure took {elapsed:.1f}s to surface"
    err = info.value
    assert (err.rank, err.killed) == (1, [0])
    text = str(err)
    assert text.startswith("the MRTPO replay failed on actor rank 1 of 2: ")
    if mode == "raise":
        assert "MemoryError: out of memory in the replay on rank 1" in text, text
    else:
        assert "Actor" in err.reason and "died" in err.reason.lower(), text
    assert text.endswith("stopped rank(s) 0, left waiting for it")
    with pytest.raises(ray.exceptions.RayActorError):  # rank 0 was killed, not left in its wait
        ray.get(actors[0].ping.remote(), timeout=PROMPT_S)


def test_upstream_dispatch_puts_rank_i_at_refs_i(ranks):
    """The contract get_ranks relies on: upstream's async_run_method_batch returns refs[i] for _actor_handlers[i]
    with chunk i (duplicate_actors 1), and async_run_method one ref per handler in order."""
    from openrlhf.trainer.ray.launcher import RayActorGroup

    group = RayActorGroup.__new__(RayActorGroup)  # its actors without placing GPU actors
    group._actor_handlers, group.duplicate_actors = ranks(3), 1
    refs = group.async_run_method_batch(method_name="replay_relevance", requests=["a", "b", "c"], k=[1, 2, 3])
    assert get_ranks(refs, group._actor_handlers) == [
        (0, "replay_relevance", {"requests": ["a"], "k": [1]}),
        (1, "replay_relevance", {"requests": ["b"], "k": [2]}),
        (2, "replay_relevance", {"requests": ["c"], "k": [3]}),
    ]
    assert get_ranks(group.async_run_method(method_name="ping"), group._actor_handlers) == [0, 1, 2]


def test_injected_failure_reaches_the_actor_replay(monkeypatch, tiny_llama):
    """MRTPO_INJECT_REPLAY_FAILURE=<rank> (test-only) raises in that rank's replay_relevance, nowhere else."""
    inject_replay_failure(0)  # unset: nothing
    monkeypatch.setenv(INJECT_ENV, "1")
    inject_replay_failure(0)  # another rank: nothing
    with pytest.raises(RuntimeError, match=f"injected replay failure on rank 1 \\({INJECT_ENV}=1\\)"):
        inject_replay_failure(1)
    monkeypatch.setenv(INJECT_ENV, "0")  # the actor replays as rank 0 without a process group
    with pytest.raises(RuntimeError, match="injected replay failure on rank 0"):
        fake_actor(tiny_llama).replay_relevance([], 0, 1, 1.0, 2, 8, "eager")


def test_the_error_survives_pickling():
    """It is raised in the trainer actor and reaches the driver through Ray."""
    import pickle

    err = pickle.loads(pickle.dumps(RankFailed("the MRTPO replay", 1, 2, "MemoryError: oom", [0])))
    assert (str(err), err.rank, err.killed) == (
        "the MRTPO replay failed on actor rank 1 of 2: MemoryError: oom; stopped rank(s) 0, left waiting for it",
        1,
        [0],
    )
