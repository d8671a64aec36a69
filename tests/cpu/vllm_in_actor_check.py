"""Run by tests/cpu/test_vllm_in_actor.py in a fresh process: the in-actor engine against vLLM's AsyncLLMEngine."""

import asyncio
import json
import sys

import torch
import vllm
import vllm.v1.worker.cpu_worker
from safetensors.torch import load_file
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.inputs import TokensPrompt

from mrtpo_openrlhf.cpu.patches import (
    kv_cache_storages,
    load_weight_round,
    released_linears,
    vllm_cpu_sleep_frees_memory,
)
from mrtpo_openrlhf.cpu.vllm_in_actor import InActorEngine

PROMPTS = [[(17 * i + 5 * j) % 900 + 50 for j in range(4 + 3 * i)] for i in range(6)]


def engine_args(model):
    return vllm.AsyncEngineArgs(
        model=model, dtype="float32", enforce_eager=True, max_model_len=128, seed=0, kv_cache_memory_bytes=32 << 20
    )


def params(i):
    if i % 2:  # seeded sampling: the same tokens whatever the batch
        return SamplingParams(temperature=1.0, seed=100 + i, max_tokens=10, ignore_eos=True)
    return SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


async def tokens(engine, i):
    last = None
    async for output in engine.generate(TokensPrompt(prompt_token_ids=PROMPTS[i]), params(i), request_id=f"r{i}"):
        last = output
    return list(last.outputs[0].token_ids)


async def all_tokens(engine):
    return await asyncio.gather(*(tokens(engine, i) for i in range(len(PROMPTS))))


async def in_actor_checks(model):
    vllm_cpu_sleep_frees_memory(vllm.v1.worker.cpu_worker)  # the CPU layer's patch (MRTPO_CPU is off here)
    engine = InActorEngine.from_engine_args(engine_args(model))
    report = {"tokens": await all_tokens(engine), "sleeping": await engine.is_sleeping()}

    # a request vLLM refuses fails alone; the engine serves the next ones
    try:
        async for _ in engine.generate(TokensPrompt(prompt_token_ids=[5] * 500), params(0), request_id="long"):
            pass
        report["too_long"] = "accepted"
    except VLLMValidationError as error:
        report["too_long"] = type(error).__name__
    report["after_error"] = await tokens(engine, 0)

    # paused: no progress until resumed
    await engine.pause_generation(mode="keep")
    task = asyncio.ensure_future(tokens(engine, 2))
    await asyncio.sleep(1.0)
    report["done_while_paused"] = task.done()
    await engine.resume_generation()
    report["after_resume"] = await task

    # a cancelled caller's request leaves the engine
    long_params = SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)

    async def long_request():
        async for _ in engine.generate(TokensPrompt(prompt_token_ids=PROMPTS[1]), long_params, request_id="c"):
            pass

    task = asyncio.ensure_future(long_request())
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    report["unfinished_after_cancel"] = engine.output_processor.get_num_unfinished_requests()

    report["rpc"] = await engine.collective_rpc(lambda worker: type(worker).__name__)
    await engine.reset_prefix_cache()

    # sleep as upstream's trainer drives it: after a generation, the weights alone woken for the weight sync, then
    # everything before the next generation; the KV cache is gone in between and comes back zeroed
    def kv(worker):
        storages = kv_cache_storages(worker.model_runner)
        # a uint8 view of each storage, not torch.tensor(storage), which copies it byte by byte through Python
        # (97 s and 140 s for the two 32 MiB checks: most of this test's time)
        views = [torch.empty(0, dtype=torch.uint8).set_(s) for s in storages]
        return [sum(s.nbytes() for s in storages), all(not bool(v.any()) for v in views)]

    report["kv_awake"] = (await engine.collective_rpc(kv))[0]
    await engine.sleep(level=1)
    report["kv_asleep"] = (await engine.collective_rpc(kv))[0]
    report["sleeping_asleep"] = await engine.is_sleeping()
    await engine.wake_up(tags=["weights"])
    report["kv_weights_woken"] = (await engine.collective_rpc(kv))[0]
    report["sleeping_weights_woken"] = await engine.is_sleeping()
    await engine.wake_up()
    report["kv_woken"] = (await engine.collective_rpc(kv))[0]
    report["sleeping_woken"] = await engine.is_sleeping()
    report["tokens_after_sleep"] = await all_tokens(engine)

    # level 2, as the CPU layer drives it at a train step's start: the engine sleeps after its generation, then a
    # deeper sleep releases the packed weights; waking to generate before a sync refuses, a full round restores them
    def released(worker):
        return released_linears(worker.model_runner.get_model())

    def sync_round(worker):
        load_weight_round(worker, list(load_file(f"{model}/model.safetensors").items()))

    await engine.sleep(level=1)
    await engine.sleep(level=2)
    report["released_asleep"] = len((await engine.collective_rpc(released))[0])
    try:
        await engine.wake_up(tags=["kv_cache"])
        report["woken_unsynced"] = "woke"
    except RuntimeError as error:
        report["woken_unsynced"] = str(error)
    await engine.wake_up(tags=["weights"])
    await engine.collective_rpc(sync_round)
    report["released_synced"] = len((await engine.collective_rpc(released))[0])
    await engine.wake_up()
    report["sleeping_synced"] = await engine.is_sleeping()
    report["tokens_after_release"] = await all_tokens(engine)
    return report


async def reference(model):
    engine = vllm.AsyncLLMEngine.from_engine_args(engine_args(model))
    try:
        return await all_tokens(engine)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    model, which = sys.argv[1], sys.argv[2]
    result = asyncio.run(in_actor_checks(model) if which == "in_actor" else reference(model))
    print("RESULT " + json.dumps(result), flush=True)
