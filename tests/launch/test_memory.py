"""The launcher's memory trace (PSS per process role, phases from the log), its estimate and its refusal to start a
run the machine cannot hold; the ``cli.memory`` table and plot."""

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from mrtpo_openrlhf.cli import memory as memory_cli
from mrtpo_openrlhf.launch import memory
from mrtpo_openrlhf.models import make_tiny_model

ALLOCATE_MB = 300
HOLDER = f"import sys, time; block = bytearray({ALLOCATE_MB} * 2**20); block[::4096] = b'x' * len(block[::4096]); "
HOLDER += "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)"


def holder(argv0):
    """A process that touches ALLOCATE_MB of private memory, named ``argv0`` (as Ray and vLLM name theirs)."""
    proc = subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" {sys.executable} -c "{HOLDER}"'], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def test_pss_is_what_a_process_holds_privately_and_roles_follow_the_process_names():
    procs = [holder("ray::MRTPOPolicyModelActorBase.fit"), holder("VLLM::Worker")]
    try:
        roles = [memory.process_role(p.pid) for p in procs]
        assert roles == ["MRTPOPolicyModelActorBase", "VLLM::Worker"]
        for p in procs:
            pss = memory.pss_bytes(p.pid)
            with open(f"/proc/{p.pid}/status") as f:
                rss = int(next(line for line in f if line.startswith("VmRSS")).split()[1]) * 1024
            assert ALLOCATE_MB * 2**20 <= pss <= rss
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert memory.pss_bytes(procs[0].pid) == 0  # gone


def test_the_trace_tags_samples_with_the_phase_and_the_summary_finds_the_peak(tmp_path):
    out = tmp_path / "memory.jsonl"
    pids = []
    trace = memory.MemoryTrace(out, lambda: pids, interval=0.2)
    with trace:
        time.sleep(0.5)  # start-up: nothing of the run yet
        trace.line("Generate samples:   0%|")
        proc = holder("ray::MRTPOPolicyModelActorBase.fit")
        pids.append(proc.pid)
        time.sleep(0.6)
        trace.line("Generate samples: 100%|██████████| 2/2")
        trace.line("Train epoch [1/1]:   0%|")
        time.sleep(0.6)
        proc.kill()
        proc.wait()
        trace.line("Train epoch [1/1]: 100%|██████████| 4/4")
        time.sleep(0.5)
        trace.line("INFO ppo_trainer.py:551] ✨ Global step 1: {'return': 1.0}")
        time.sleep(0.3)
    rows = memory.read_trace(out)
    phases = [r["phase"] for r in rows]
    assert phases[0] == "start-up" and {"generation", "training", "sync+save", "step_end"} <= set(phases)
    assert phases.index("generation") < phases.index("training") < phases.index("sync+save")
    assert rows[-1]["step"] == 1 and rows[0]["step"] == 0
    summary = trace.summary()
    assert summary["peak_pss_gib"] >= ALLOCATE_MB / 1024
    assert summary["peak_phase"] in ("generation", "experience", "training")
    assert list(summary["peak_by_role_gib"]) == ["MRTPOPolicyModelActorBase"]
    assert summary["peak_pss_by_phase_gib"]["start-up"] == 0
    assert summary["samples"] == len(rows)


def test_the_launcher_counts_itself_once_under_its_own_name(tmp_path):
    proc = holder("ray::MRTPOPolicyModelActorBase.fit")
    try:
        me = os.getpid()
        # the pids callback may or may not list this process: it is counted once either way
        for listed in ([proc.pid], [proc.pid, me]):
            trace = memory.MemoryTrace(None, lambda listed=listed: listed, own_role="launcher")
            sample = trace.sample()
            assert set(sample.by_role) == {"MRTPOPolicyModelActorBase", "launcher"}
            assert sample.by_role["launcher"] == pytest.approx(memory.pss_bytes(me), rel=0.2)
        assert set(memory.MemoryTrace(None, lambda: [proc.pid, me]).sample().by_role) == {"MRTPOPolicyModelActorBase"}
    finally:
        proc.kill()
        proc.wait()


def test_the_memory_command_prints_each_phase_and_draws_the_trace(tmp_path, capsys):
    def row(t, phase, step, pss, available, roles):
        return dict(t=t, phase=phase, step=step, pss_gib=pss, available_gib=available, by_role_gib=roles)

    rows = [
        row(1.0, "start-up", 0, 1.0, 20.0, {"driver": 1.0}),
        row(2.0, "training", 0, 5.0, 16.0, {"actor": 4.0, "driver": 1}),
        row(3.0, "sync+save", 1, 3.0, 18.0, {"actor": 2.0, "driver": 1}),
    ]
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert memory_cli.main([str(tmp_path), "--plot", str(tmp_path / "m.png")]) == 0
    text = capsys.readouterr().out
    assert "peak 5.00 GiB PSS at 2s (step 0, training)" in text and "lowest 16.0" in text
    training = next(line for line in text.splitlines() if line.startswith("training"))
    assert training.split()[1:] == ["4.00", "1.00", "5.00"]
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    assert memory_cli.main([str(tmp_path / "nowhere")]) == 2
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert memory_cli.main([str(tmp_path / "bad.jsonl")]) == 2
    assert "not a memory trace" in capsys.readouterr().err


def test_shape_counts_the_models_parameters_from_its_files(tmp_path):
    from transformers import AutoModelForCausalLM

    path = make_tiny_model(tmp_path / "m", seed=0, tie_word_embeddings=False)
    flags = ["--actor.model_name_or_path", str(path), "--train.micro_batch_size", "4", "--rollout.max_new_tokens", "32"]
    shape = memory.shape_from_args(flags + ["--algo.kl.init_coef", "0.01"], {"MRTPO_CPU_KV_CACHE_MB": "256"})
    model = AutoModelForCausalLM.from_pretrained(path)
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert (shape.vocab, shape.train_rows, shape.logit_positions) == (model.config.vocab_size, 4, 33)
    assert shape.kv_cache_gib == 0.25 and shape.reference
    assert memory.shape_from_args(flags, {"VLLM_CPU_KVCACHE_SPACE": "2"}).kv_cache_gib == 2.0
    assert not memory.shape_from_args(flags, {}).reference
    assert memory.shape_from_args(["--actor.model_name_or_path", "HuggingFaceTB/not-local"], {}) is None
    # more rows, more logits: the estimate grows by the documented 3 x 2 bytes per logit
    more = memory.shape_from_args(flags[:3] + ["8"] + flags[4:], {"MRTPO_CPU_KV_CACHE_MB": "256"})
    less = memory.shape_from_args(flags, {"MRTPO_CPU_KV_CACHE_MB": "256"})
    assert memory.estimate_run_bytes(more) - memory.estimate_run_bytes(less) == 3 * 2 * 4 * 33 * shape.vocab
    # upstream's trainer as an actor of its own: one process floor more
    apart = memory.shape_from_args(flags, {"MRTPO_CPU_KV_CACHE_MB": "256", "MRTPO_CPU_TRAINER_IN_DRIVER": "0"})
    assert apart.trainer_process and not less.trainer_process
    assert abs(memory.estimate_run_bytes(apart) - memory.estimate_run_bytes(less) - 0.6 * memory.GIB) <= 1
    # fp32: 2 bytes more for the weights, the gradients, both of vLLM's copies and each logit, 4 less for the master
    # weights (the parameters' own partition), and the fp32 floor
    wide = memory.shape_from_args(flags, {"MRTPO_CPU_KV_CACHE_MB": "256", "MRTPO_CPU_DTYPE": "fp32"})
    assert wide.dtype_bytes == 4 and less.dtype_bytes == 2
    extra = (2 + 2 + 4 - 4) * shape.params + 3 * 2 * 4 * 33 * shape.vocab + memory.FP32_EXTRA_FLOOR_GIB * memory.GIB
    assert abs(memory.estimate_run_bytes(wide) - memory.estimate_run_bytes(less) - extra) <= 1
    # vLLM's engine core in a process of its own: that process's runtime more
    core = memory.shape_from_args(flags, {"MRTPO_CPU_KV_CACHE_MB": "256", "MRTPO_CPU_VLLM_CORE_IN_ACTOR": "0"})
    assert core.vllm_process and not less.vllm_process
    assert abs(memory.estimate_run_bytes(core) - memory.estimate_run_bytes(less) - 0.65 * memory.GIB) <= 1
    # DeepSpeed asleep between steps: vLLM's second weight copy and the actor's gradients never meet, one counts
    asleep = memory.shape_from_args(flags + ["--ds.enable_sleep"], {"MRTPO_CPU_KV_CACHE_MB": "256"})
    assert asleep.deepspeed_sleeps and not less.deepspeed_sleeps
    assert memory.estimate_run_bytes(less) - memory.estimate_run_bytes(asleep) == 2 * shape.params
    # and vLLM asleep too, giving its weights up while the actor trains: neither copy counts; not when the weight
    # sync does not load, when the switch is off, or when vLLM's core runs apart (the deeper sleep never reaches it)
    both = flags + ["--ds.enable_sleep", "--vllm.enable_sleep"]
    released = memory.shape_from_args(both, {"MRTPO_CPU_KV_CACHE_MB": "256"})
    assert released.vllm_releases_weights
    assert memory.estimate_run_bytes(asleep) - memory.estimate_run_bytes(released) == 2 * shape.params
    assert not memory.shape_from_args(flags + ["--ds.enable_sleep"], {}).vllm_releases_weights
    for env in ({"MRTPO_CPU_SKIP_WEIGHT_SYNC": "1"}, {"MRTPO_CPU_VLLM_RELEASE_WEIGHTS": "0"}):
        assert not memory.shape_from_args(both, env).vllm_releases_weights
    assert not memory.shape_from_args(both, {"MRTPO_CPU_VLLM_CORE_IN_ACTOR": "0"}).vllm_releases_weights


def test_check_fits_says_what_to_do_in_one_line():
    assert memory.check_fits(10 * memory.GIB, available=12 * memory.GIB) is None
    line = memory.check_fits(10 * memory.GIB, available=4 * memory.GIB)
    assert "\n" not in line and "10.0 GiB" in line and "4.0 GiB" in line and "MRTPO_SKIP_MEMORY_CHECK=1" in line


def test_the_launcher_refuses_a_run_the_machine_cannot_hold_before_starting_anything(tmp_path):
    path = make_tiny_model(tmp_path / "m", seed=0)
    workdir = tmp_path / "run"
    command = [sys.executable, "-m", "mrtpo_openrlhf.launch", "--workdir", str(workdir), "--"]
    command += ["mrtpo_openrlhf.cli.train_ppo_ray", "--actor.model_name_or_path", str(path)]
    command += ["--train.micro_batch_size", "100000", "--rollout.max_new_tokens", "4096"]  # terabytes of logits
    env = {k: v for k, v in os.environ.items() if k != memory.SKIP_CHECK_ENV}
    started = time.time()
    res = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2, res.stderr[-3000:]
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("[mrtpo.launch]")]
    assert "this run needs about" in line and "available" in line
    assert not workdir.exists() and time.time() - started < 60  # no Ray head, no run folder


@pytest.mark.parametrize("line, phase", [("Generate samples:  50%", "generation"), ("noise", "training")])
def test_phase_markers(line, phase):
    assert memory.phase_of_line(line, "training") == phase


def _config(folder, **over):
    """SmolLM2-135M's attention shape (its config.json), or another with ``over``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    (folder / "config.json").write_text(json.dumps({**config, **over}))
    return folder


def test_kv_cache_is_sized_from_the_run_shape(tmp_path):
    from mrtpo_openrlhf.launch.memory import kv_cache_mib

    model = _config(tmp_path / "smollm2")
    args = ["--actor.model_name_or_path", str(model), "--rollout.batch_size", "2"]
    args += ["--rollout.n_samples_per_prompt", "4", "--data.max_len", "640"]
    # by hand: 2 (K and V) x 30 layers x 3 KV heads x 64 values x 2 bytes = 23,040 bytes a token;
    # 8 sequences x 640 tokens x 23,040 x 1.5 = 176,947,200 bytes = 168.75 MiB
    mib, why = kv_cache_mib(args, 2)
    assert mib == 169 and "8 sequences x 640 tokens x 22.5 KiB a token x 1.5" in why
    assert kv_cache_mib(args, 4)[0] == 338  # fp32: twice the bytes
    # the last value of a flag counts (the CLI appends the user's flags after the recipe's), engines share
    assert kv_cache_mib([*args, "--data.max_len", "1280", "--vllm.num_engines", "2"], 2)[0] == 169
    # head_dim given (Qwen3-style) wins over hidden / heads (128, not 64: twice the bytes); a short run gets the floor
    wide = ["--actor.model_name_or_path", str(_config(tmp_path / "q", head_dim=128))]
    assert kv_cache_mib([*args, *wide], 2)[0] == 338
    assert kv_cache_mib([*wide, "--data.max_len", "64"], 2)[0] == 64
    assert kv_cache_mib(["--actor.model_name_or_path", "HuggingFaceTB/SmolLM2-135M"], 2)[0] == 512


def test_the_user_sizes_the_kv_cache_when_given(monkeypatch):
    from mrtpo_openrlhf.launch.runner import kv_cache_given

    monkeypatch.delenv("MRTPO_CPU_KV_CACHE_MB", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert not kv_cache_given() and kv_cache_given({"MRTPO_CPU_KV_CACHE_MB": "256"})
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert kv_cache_given()


def test_one_address_space_seen_through_two_pids_is_counted_once():
    """A vfork child between fork and exec shares its parent's address space and reports the parent's whole PSS
    (the actor starting g++ showed as a second 3.35 GiB process for one sample). A thread id stands in for it: the
    kernel answers /proc/<tid> with the process's memory."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
         + HOLDER],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == b"ready"
        tid = max(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        assert tid != proc.pid and memory.pss_bytes(tid) >= ALLOCATE_MB * 2**20  # the double count to avoid
        assert memory.share_address_space(proc.pid, tid)
        assert not memory.share_address_space(proc.pid, os.getpid())
        trace = memory.MemoryTrace(None, lambda: [proc.pid, tid])
        assert trace.sample().total == pytest.approx(memory.pss_bytes(proc.pid), rel=0.05)
    finally:
        proc.kill()
        proc.wait()


def test_a_vfork_child_that_execs_right_after_its_pss_is_read_is_not_counted(monkeypatch):
    """The race seen in a run (a second 2.05 GiB "process" for one sample, beside the actor's 2.05): the child's PSS
    was read while it still shared the actor's address space, and it had exec'd by the time that was checked."""
    parent, child = 1001, 1002
    state = {"shared": True}

    def observe(pid, shared_answer, own_answer):
        answer = shared_answer if state["shared"] else own_answer
        if pid == child:
            state["shared"] = False  # the exec comes right after the first look at the child
        return answer

    def pss(pid):
        return 2 * memory.GIB if pid == parent else observe(pid, 2 * memory.GIB, 10 * 2**20)

    monkeypatch.setattr(memory, "pss_bytes", pss)
    monkeypatch.setattr(memory, "share_address_space", lambda a, b: observe(a, {a, b} == {parent, child}, False))
    monkeypatch.setattr(memory, "process_role", lambda pid: "actor" if pid == parent else str(pid))
    monkeypatch.setattr(memory, "peak_rss_bytes", lambda pid: 0)
    monkeypatch.setattr(memory, "start_ticks", {parent: 5, child: 9}.get)
    trace = memory.MemoryTrace(None, lambda: [child, parent])  # the child's pid first, as after a pid wrap-around
    assert trace.sample().total == 2 * memory.GIB
    assert trace.sample().total == 2 * memory.GIB + 10 * 2**20  # exec'd: a process of its own from then on


def test_start_ticks_orders_a_parent_before_its_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert 0 < memory.start_ticks(os.getpid()) <= memory.start_ticks(child.pid)
        assert memory.start_ticks(2**22 + 7) == 0  # no such process
    finally:
        child.kill()
        child.wait()


def test_a_peak_between_two_samples_is_kept_by_the_kernels_high_water_mark():
    """A process that touched 300 MB and freed it before the first sample: PSS shows little, VmHWM keeps the peak."""
    code = HOLDER.replace("sys.stdout.write", "del block; import gc; gc.collect(); sys.stdout.write")
    command = ["bash", "-c", f'exec -a "VLLM::Worker" {sys.executable} -c "{code}"']
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        trace = memory.MemoryTrace(None, lambda: [proc.pid])
        sample = trace.sample()
        assert sample.by_role["VLLM::Worker"] < ALLOCATE_MB * 2**20 / 2  # the block was given back
        summary = trace.summary()
        assert summary["role_peak_rss_gib"]["VLLM::Worker"] >= ALLOCATE_MB / 1024
        assert "each role's own peak RSS (VmHWM" in memory.format_summary(summary)[-1]
    finally:
        proc.kill()
        proc.wait()


def test_the_estimate_bounds_the_measured_peaks_closely():
    """The two shapes the floors were calibrated on (SmolLM2-135M: 134,515,008 parameters, vocabulary 49,152), against
    their peaks measured side by side on an idle 2-core AMD EPYC (docs/cpu.md): above each, by at most 15%, so a
    machine that can hold the run is not refused."""
    params, vocab = 134_515_008, 49_152
    default = memory.RunShape(params, vocab, train_rows=4, logit_positions=97, kv_cache_gib=169 / 1024)
    study = memory.RunShape(params, vocab, train_rows=4, logit_positions=161, kv_cache_gib=338 / 1024)
    apart = dataclasses.replace  # vLLM's engine core in a process of its own (MRTPO_CPU_VLLM_CORE_IN_ACTOR=0)
    measured = (
        (default, 5.75),
        (study, 5.80),
        # measured at 7cd5635, before vLLM slept without its KV cache
        (apart(default, vllm_process=True), 6.35),
        (apart(study, vllm_process=True), 6.61),
        (apart(default, dtype_bytes=4, kv_cache_gib=338 / 1024), 6.74),  # fp32: a CPU without bf16 instructions
        # fp32 with DeepSpeed asleep between steps (ae64883, 2-core AMD EPYC with AVX2 only), micro-batches of 4 and 2
        (apart(default, dtype_bytes=4, kv_cache_gib=338 / 1024, deepspeed_sleeps=True), 6.54),
        (apart(default, dtype_bytes=4, kv_cache_gib=338 / 1024, deepspeed_sleeps=True, train_rows=2), 6.17),
        # the README's first command at 65ae553 (micro-batches of 2 for the log-prob forwards too), same machine
        (apart(default, dtype_bytes=4, kv_cache_gib=338 / 1024, deepspeed_sleeps=True, train_rows=2), 5.94),
        # and vLLM's weights released while the actor trains (88c679d, same machine, benchmarks/default_memory.py)
        (
            apart(
                default,
                dtype_bytes=4,
                kv_cache_gib=338 / 1024,
                deepspeed_sleeps=True,
                train_rows=2,
                vllm_releases_weights=True,
            ),
            5.41,
        ),
    )
    for shape, measured_gib in measured:
        estimate = memory.estimate_run_bytes(shape) / memory.GIB
        assert measured_gib <= estimate <= 1.15 * measured_gib, (shape, estimate)


def test_each_sample_carries_the_step_whose_work_it_sees():
    """Issue 49, item 8: a sample in step 2's generation read step 1 (the last logged one)."""
    trace = memory.MemoryTrace(None, lambda: [])
    seen = []
    for line in [
        "loading the model",
        "Generate samples:  50%|",
        "Train epoch [1/1]:  50%|",
        "Train epoch [1/1]: 100%|",
        "✨ Global step 1: {'return': 1.0}",
        "Generate samples:   0%|",
        "Generate samples: 100%|",
        "Train epoch [1/1]:  10%|",
        "✨ Global step 2: {}",
    ]:
        trace.line(line)
        seen.append((trace.phase, trace.sample().step))
    assert seen == [
        ("start-up", 0),
        ("generation", 1),
        ("training", 1),
        ("sync+save", 1),
        ("step_end", 1),
        ("generation", 2),
        ("experience", 2),
        ("training", 2),
        ("step_end", 2),
    ]


@pytest.mark.parametrize("resumed", [False, True])
def test_a_run_starts_its_own_memory_trace(tmp_path, resumed):
    """Issue 49, item 8: ``memory.jsonl`` was appended to run after run, so ``cli.memory`` read a 4-step run's peak
    at "step 9" from an earlier run's rows."""
    from mrtpo_openrlhf.launch.runner import prepare_workdir

    (tmp_path / "memory.jsonl").write_text(json.dumps({"t": 1.0, "step": 9}) + "\n")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    args = ["--ckpt.load_enable"] if resumed else []
    prepare_workdir(tmp_path, {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, args, {}, None)
    assert not (tmp_path / "memory.jsonl").exists()
    assert (tmp_path / "metrics.jsonl").exists() == resumed  # the trainer continues a resumed run's metrics
