"""vLLM's engine core inside the rollout actor (CPU layer): one process fewer that imports torch and vLLM.

Upstream's ``RolloutRayActor`` builds ``vllm.AsyncLLMEngine``, whose core always runs in a process of its own
(``VLLM::EngineCore``): on CPU that is a second copy of the torch and vLLM runtimes beside the actor's, about
0.4 GiB of a 6 GiB run. vLLM's synchronous ``LLMEngine`` can keep its core in the calling process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``). ``InActorEngine`` puts it behind the async methods the actor calls
(``generate``, ``collective_rpc``, ``reset_prefix_cache``, pause/resume, sleep/wake-up, ``output_processor``):
requests are added as they arrive and one stepping task, on the actor's event loop, runs the engine while any
request waits, so concurrent requests share a batch as they do in the engine-core process. The engine's steps run
on the event loop thread, between the other coroutines (reward calls), never beside them, so nothing in the engine
is touched from two threads.

``cpu/patches.py`` (``vllm_core_in_actor``) hands this class to upstream's actor in place of ``AsyncLLMEngine``;
``MRTPO_CPU_VLLM_CORE_IN_ACTOR=0`` restores vLLM's engine-core process.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any, AsyncIterator, Dict, Optional

from ..env_flags import flag_on

SWITCH = "MRTPO_CPU_VLLM_CORE_IN_ACTOR"


def core_in_actor(environ=None) -> bool:
    """On while ``MRTPO_CPU_VLLM_CORE_IN_ACTOR`` is unset (the CPU layer's default), else read as every switch is."""
    return flag_on(SWITCH, environ, default=True)


class InActorEngine:
    """The subset of ``vllm.AsyncLLMEngine`` that ``RolloutRayActor`` uses, on a synchronous in-process engine."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.output_processor = engine.output_processor
        self._waiting: Dict[str, asyncio.Future] = {}
        self._stepper: Optional[asyncio.Task] = None
        self._running = asyncio.Event()
        self._running.set()

    @classmethod
    def from_engine_args(cls, engine_args: Any) -> "InActorEngine":
        import vllm
        from vllm import envs

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        envs.disable_envs_cache()  # a cached True would still spawn the core process
        engine = vllm.LLMEngine.from_engine_args(engine_args)
        return cls(engine)

    async def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncIterator[Any]:
        """Yields the finished ``RequestOutput`` once (the caller keeps the last item, as with AsyncLLMEngine)."""
        from vllm.sampling_params import RequestOutputKind

        params = copy.copy(sampling_params)
        params.output_kind = RequestOutputKind.FINAL_ONLY
        if request_id in self._waiting:
            raise ValueError(f"request {request_id!r} is already running")
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            self.engine.add_request(request_id, prompt, params)
        except BaseException:
            self._waiting.pop(request_id, None)
            raise
        if self._stepper is None or self._stepper.done():
            self._stepper = asyncio.ensure_future(self._step_while_waiting())
        try:
            output = await future
        except asyncio.CancelledError:
            if self._waiting.pop(request_id, None) is not None:
                self.engine.abort_request([request_id])
            raise
        yield output

    async def _step_while_waiting(self) -> None:
        try:
            while self._waiting:
                await self._running.wait()
                for output in self.engine.step():
                    if output.finished:
                        future = self._waiting.pop(output.request_id, None)
                        if future is not None and not future.done():
                            future.set_result(output)
                if self._waiting and self.engine.get_num_unfinished_requests() == 0:
                    raise RuntimeError(f"vLLM finished without an output for {sorted(self._waiting)[:3]}")
                await asyncio.sleep(0)  # requests that arrived meanwhile join the next step
        except BaseException as error:  # every waiting caller fails with the engine's error instead of hanging
            waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                if not future.done():
                    future.set_exception(error if isinstance(error, Exception) else RuntimeError(repr(error)))
            raise

    async def collective_rpc(self, method, timeout=None, args: tuple = (), kwargs=None):
        return self.engine.collective_rpc(method, timeout, args, kwargs)

    async def reset_prefix_cache(self, *args, **kwargs):
        return self.engine.reset_prefix_cache(*args, **kwargs)

    async def pause_generation(self, mode: str = "keep") -> None:
        """Hold the running requests where they are ("keep"); the next ``resume_generation`` continues them."""
        if mode != "keep":
            raise NotImplementedError(f"pause mode {mode!r} (only 'keep' is used by upstream's actor)")
        self._running.clear()

    async def resume_generation(self) -> None:
        self._running.set()

    async def sleep(self, level: int = 1) -> None:
        if level >= 2 and self.engine.is_sleeping():
            # vLLM's executor ignores a second sleep; a deeper one still reaches the workers (a level-2 sleep on CPU
            # releases the weights a sync is about to replace: cpu/patches.py, vllm_cpu_sleep_frees_memory)
            self.engine.collective_rpc("sleep", kwargs={"level": level})
            return
        self.engine.sleep(level=level)

    async def wake_up(self, tags=None) -> None:
        self.engine.wake_up(tags=tags)

    async def is_sleeping(self) -> bool:
        return self.engine.is_sleeping()
