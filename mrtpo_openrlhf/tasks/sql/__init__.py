"""Text-to-SQL: rewards format, executable, execution (``reward.py``), the SQLite verifier (``verifier/``), the
Spider and BIRD benchmarks (``benchmarks.py``)."""

from mrtpo_openrlhf.tasks import CODE_FENCES, THINK_TAGS, Benchmark, BenchmarkOption, Task

SPIDER_TIMEOUT_S = 60.0  # exec_eval.py TIMEOUT (there it never fires; here the sandbox really stops the query)
BIRD_TIMEOUT_S = 30.0  # BIRD evaluation.py meta_time_out
# what the reward and the verifier read; forwarded to every Ray worker
DB_ROOT_ENV = "MRTPO_SQL_DB_ROOT"
TIMEOUT_ENV = "MRTPO_SQL_TIMEOUT_S"
MAX_ROWS_ENV = "MRTPO_SQL_MAX_ROWS"
WORKERS_ENV = "MRTPO_SQL_WORKERS"

_SQL_BENCHMARK = dict(
    module="mrtpo_openrlhf.tasks.sql.benchmarks",
    summarizer="summarize_sql",
    answer_field="sql",
    threaded=True,
    predictions="mrtpo_openrlhf.tasks.sql.benchmarks",
)

TASK = Task(
    name="sql",
    reward_module="mrtpo_openrlhf.tasks.sql.reward",
    reward_file="reward_funcs/sql.py",
    train_data="sql/train_mini.jsonl",
    # the CPU default's prompts carry a worked example of the layout; SmolLM2-135M follows nothing less
    cpu_train_data="sql/train_mini_oneshot.jsonl",
    label_keys=("gold",),
    prompt_builder="build_prompt",
    benchmarks=(
        Benchmark(
            "spider",
            loader="load_spider",
            scorer="score_spider",
            columns="spider_columns",
            options=(
                BenchmarkOption("--spider-timeout", "timeout_s", SPIDER_TIMEOUT_S, "seconds per query", type=float),
                BenchmarkOption(
                    "--keep-distinct",
                    "keep_distinct",
                    False,
                    "do not remove DISTINCT (the official flag)",
                    action="store_true",
                ),
            ),
            default_data="sql",
            **_SQL_BENCHMARK,
        ),
        Benchmark(
            "bird",
            loader="load_bird",
            scorer="score_bird",
            columns="bird_columns",
            options=(
                BenchmarkOption(
                    "--bird-timeout", "timeout_s", BIRD_TIMEOUT_S, "seconds for pred and gold together", type=float
                ),
            ),
            default_data="sql/bird",
            **_SQL_BENCHMARK,
        ),
    ),
    span_kinds=("tags", "select_columns"),
    format_tags=(THINK_TAGS, CODE_FENCES),
    example_responses="example_responses",
    gpu_script="train_mrtpo_sql.sh",
    gpu_model="Qwen/Qwen2.5-Coder-7B-Instruct",  # MODEL=Qwen/Qwen2.5-Coder-3B-Instruct for the 3B runs
    gpu_max_new_tokens=2048,
    make_data=(
        "python -m mrtpo_openrlhf.rewards.sql convert --format bird"
        " --input BIRD/train/train.json --db-root BIRD/train/train_databases --out sql_train.jsonl"
    ),
    command="main",
    unearnable="unearnable_rewards",
    env_vars=(TIMEOUT_ENV, MAX_ROWS_ENV, DB_ROOT_ENV, WORKERS_ENV),
    path_env_vars=(DB_ROOT_ENV,),
    null_position="appended",  # the execution rewards' blocks (SQLite error, reference) are appended
)
