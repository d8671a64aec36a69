"""Run by tests/cpu/test_vllm_in_actor.py in a fresh process: the in-actor engine against vLLM's AsyncLLMEngine."""

import asyncio
import json
import sys

import vllm
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.inputs import TokensPrompt

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
