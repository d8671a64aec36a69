"""Tool calling: rewards format, correctness (``reward.py``), the BFCL AST matcher (``verifier/``) and the BFCL
benchmark (``benchmarks.py``)."""

from mrtpo_openrlhf.tasks import THINK_TAGS, TOOL_CALL_TAGS, Benchmark, BenchmarkOption, Task

# The single-turn categories the AST matcher scores (multi-turn, web search, memory are not AST).
AST_CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "irrelevance",
    "live_irrelevance",
    "live_relevance",
)

TASK = Task(
    name="tool",
    reward_module="mrtpo_openrlhf.tasks.tool.reward",
    reward_file="reward_funcs/tool.py",
    train_data="tool/train_mini.jsonl",
    label_keys=("functions", "ground_truth"),
    prompt_builder="build_prompt",
    benchmarks=(
        Benchmark(
            "bfcl",
            module="mrtpo_openrlhf.tasks.tool.benchmarks",
            predictions="mrtpo_openrlhf.tasks.tool.benchmarks",
            official_files="bfcl_score_files",
            group="category",
            coverage_note="; BFCL categories without any are left out",
            options=(
                BenchmarkOption(
                    "--bfcl-category",
                    "categories",
                    default=AST_CATEGORIES,
                    help="an AST category to run, repeatable",
                    to="loader",
                    choices=AST_CATEGORIES,
                    action="append",
                ),
            ),
        ),
    ),
    span_kinds=("tags", "function_name", "tool_arguments"),
    # correctness checks the whole call; its arguments are what it reads beyond the function reward's name
    checker_spans=(("format", "tags"), ("function", "function_name"), ("correctness", "tool_arguments")),
    format_tags=(THINK_TAGS, TOOL_CALL_TAGS),
    example_responses="example_responses",
    gpu_script="train_mrtpo_tool.sh",
    gpu_model="Qwen/Qwen2.5-7B-Instruct",
    gpu_max_new_tokens=1024,
    make_data="python -m mrtpo_openrlhf.rewards.tool convert --input tool_train.jsonl --out tool_train_rows.jsonl",
    command="main",
    unearnable="unearnable_rewards",
    null_position="appended",  # the function and correctness blocks are appended
)
