"""Instruction following: one reward per constraint (``reward.py``), the IFEval/IFBench/MulDimIF checkers
(``verifier/``) and those three benchmarks (``benchmarks.py``)."""

from mrtpo_openrlhf.tasks import THINK_TAGS, Benchmark, Task

_MODULE = "mrtpo_openrlhf.tasks.instruction.benchmarks"
_IF = dict(
    module=_MODULE,
    scorer="score_instructions",
    summarizer="summarize_instructions",
    keyed_by_prompt=True,
    official_files="ifeval_files",
)

TASK = Task(
    name="instruction",
    reward_module="mrtpo_openrlhf.tasks.instruction.reward",
    reward_file="reward_funcs/instruction.py",
    train_data="instructions/train_mini.jsonl",
    label_keys=("instruction_id_list", "constraints"),
    benchmarks=(
        Benchmark(
            "ifeval",
            loader="load_ifeval",
            columns="ifeval_columns",
            default_data="eval_fixtures/ifeval",
            **_IF,
        ),
        Benchmark("ifbench", loader="load_ifbench", columns="ifbench_columns", **_IF),
        Benchmark(
            "muldimif",
            module=_MODULE,
            loader="load_muldimif",
            scorer="score_muldimif",
            summarizer="summarize_muldimif",
            columns="muldimif_columns",
            default_data="eval_fixtures/muldimif",
        ),
    ),
    span_kinds=("tags", "target"),
    checker_spans=(("*", "target"),),  # every constraint's checker reads its own target span
    format_tags=(THINK_TAGS,),
    constraint_specs="constraint_specs",
    example_responses="example_responses",
    gpu_script="train_mrtpo_if.sh",
    gpu_model="Qwen/Qwen3-4B-Instruct-2507",  # MODEL=Qwen/Qwen2.5-7B-Instruct for the other runs
    gpu_max_new_tokens=2048,
    make_data=(
        "python -m mrtpo_openrlhf.rewards.instruction convert --format hir16k"
        " --input HIR-16K.jsonl --out if_train.jsonl"
    ),
    command="main",
    unearnable="unearnable_rewards",
    null_position="inline",  # the constraints sit in the prompt
)
