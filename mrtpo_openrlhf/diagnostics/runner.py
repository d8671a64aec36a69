"""The diagnostics pipeline: responses -> rewards -> replay of every pair -> statistics -> files.

It follows the training path (``adapter.experience_maker``): the prompt is the chat-templated row prompt
(OpenRLHF's ``--data.apply_chat_template``), the reward is the task's own ``reward_func`` called on
``prompt + decoded response`` with the row's label, and the replay requests come from
``core.request_from_text`` with the same block separator. Unlike training, every (response, reward)
pair with a non-empty block is replayed, whatever its group advantage.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from mrtpo_openrlhf.core import DEFAULT_RELEVANCE, chat_suffix_text, get_relevance, replay_relevance, request_from_text
from mrtpo_openrlhf.core.null_block import NULL_APPENDED, NULL_INLINE, NULL_TEXT, NullBlock, with_null_blocks
from mrtpo_openrlhf.core.settings import DEFAULT_BLOCK_SEPARATOR, DEFAULT_CHUNK_SIZE, DEFAULT_REPLAY_MICRO_BATCH_SIZE
from mrtpo_openrlhf.data.jsonl import DatasetError, read_jsonl, write_jsonl
from mrtpo_openrlhf.paths import display_path
from mrtpo_openrlhf.rewards.contract import RewardVector, label_object, parse_extra_logs
from mrtpo_openrlhf.tasks import TASKS, get_reward_func, get_task, task_of_label

from .html import render_page
from .spans import locate_spans, spans_to_token_mask, token_char_offsets
from .stats import interval, null_control, null_stats, pair_stats, reward_group, summarize

BLOCK_SEPARATOR = DEFAULT_BLOCK_SEPARATOR  # the training default (--algo.mrtpo.block_separator)
# The null block (one home: ``core.null_block``, the task's ``null_block``): a neutral sentence no reward reads,
# replayed like one more reward on every response (``with_null_blocks``); ``--null ''`` switches it off.


class DiagnoseError(ValueError):
    """Bad input to the diagnostics (model, data, responses); the message says what to fix."""


@dataclass
class Sample:
    """One response to diagnose.

    prompt: the chat-templated prompt text (what the model was conditioned on);
    response_ids: the response token ids (as sampled, or tokenized from a --responses file).
    """

    prompt_index: int
    sample: int
    prompt: str
    label: Any
    response_ids: list[int]


# ------------------------------------------------------------------------------------------- inputs
def resolve_model(model: str) -> Path:
    """``smollm2`` -> the cached SmolLM2 HF folder; otherwise an existing HF model folder."""
    if model == "smollm2":
        from mrtpo_openrlhf.models import ensure_smollm2

        return ensure_smollm2()
    path = Path(model).expanduser()
    if not path.is_dir():
        raise DiagnoseError(f"--model {model!r}: not a folder (give an HF model folder or 'smollm2')")
    if not (path / "config.json").is_file():
        raise DiagnoseError(f"--model {model!r}: no config.json inside, not an HF model folder")
    return path


def infer_task(label: Any) -> str:
    """Task of a row from its label's shape: the registered task whose ``label_keys`` the label has (SQL "gold",
    tool calling "functions", instructions "instruction_id_list"/"constraints")."""
    try:
        matches = task_of_label(label_object(label))
    except ValueError:
        matches = []
    if len(matches) == 1:
        return matches[0]
    found = f"the label fits {' and '.join(matches)}" if matches else "cannot tell the task from the label"
    raise DiagnoseError(f"{found}; pass --task {'|'.join(TASKS)}")


def resolve_data(data: str, task: str | None) -> tuple[Path, str]:
    """--data (a task name for its bundled mini set, or a JSONL path) -> (path, task)."""
    if task is not None and task not in TASKS:
        raise DiagnoseError(f"--task {task!r}: choose from {', '.join(sorted(TASKS))}")
    if data in TASKS:
        if task is not None and task != data:
            raise DiagnoseError(f"--data {data} is the bundled {data} set but --task is {task}")
        return get_task(data).train_data_path(), data
    path = Path(data).expanduser()
    if not path.is_file():
        raise DiagnoseError(f"--data {data!r}: no such file and not a task name ({', '.join(sorted(TASKS))})")
    if task is None:
        rows = load_rows(path, limit=1, need=("prompt", "label"))
        task = infer_task(rows[0]["label"])
    return path, task


def load_rows(path: Path, limit: int | None = None, need: Sequence[str] = ("prompt", "label")) -> list[dict]:
    """JSONL rows with the fields ``need`` (``prompt``/``response`` must be strings); DiagnoseError names
    the file and line of a bad row."""

    def check(row: dict) -> None:
        for key in need:
            if key not in row:
                raise ValueError(f"missing field {key!r}")
        for key in ("prompt", "response"):
            if key in need and not isinstance(row[key], str):
                raise ValueError(f"field {key!r} must be a string")

    try:
        rows = read_jsonl(path, check)
    except DatasetError as exc:
        raise DiagnoseError(str(exc)) from None
    if not rows:
        raise DiagnoseError(f"{path}: no rows")
    return rows[:limit] if limit else rows


def template_prompt(tokenizer: Any, prompt: str) -> str:
    """The prompt as OpenRLHF's --data.apply_chat_template renders it (one user turn + assistant header);
    a prompt already ending with the template's assistant header is kept as is."""
    suffix = chat_suffix_text(tokenizer)
    if not suffix or prompt.endswith(suffix):
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids without added special tokens (the templated text carries its own), as the replay does."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------------------------------- responses
def cut_at_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """Response ids up to and including the first end-of-sequence token (padding after it dropped)."""
    out = []
    for tok in ids:
        out.append(int(tok))
        if tok in eos_ids:
            break
    return out


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos = eos if isinstance(eos, list) else [eos]
    return [int(e) for e in eos + [tokenizer.eos_token_id] if e is not None]


@torch.no_grad()
def generate_samples(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict],
    samples_per_prompt: int,
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
) -> list[Sample]:
    """Sample ``samples_per_prompt`` responses per row with transformers' generate (one prompt per call)."""
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    random.seed(seed)
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    samples = []
    for i, row in enumerate(tqdm(rows, desc="generate", unit="prompt")):
        prompt = template_prompt(tokenizer, row["prompt"])
        ids = torch.tensor([encode(tokenizer, prompt)], dtype=torch.long)
        sampling = (
            dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
            if temperature > 0
            else dict(do_sample=False)
        )
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            num_return_sequences=samples_per_prompt,
            pad_token_id=pad,
            eos_token_id=eos,
            **sampling,
        )
        for s in range(samples_per_prompt):
            samples.append(Sample(i, s, prompt, row["label"], cut_at_eos(out[s, ids.shape[1] :].tolist(), eos)))
    return samples


def read_samples(tokenizer: Any, path: Path, limit: int | None = None) -> list[Sample]:
    """Samples from a --responses JSONL: rows {"prompt", "response", "label"} (optionally "response_ids",
    used as is). Rows with the same prompt share a prompt index; the response text is tokenized otherwise."""
    rows = load_rows(path, None, need=("prompt", "response", "label"))
    prompt_index: dict[str, int] = {}
    count: dict[int, int] = {}
    samples = []
    for row in rows:
        if row["prompt"] not in prompt_index:
            if limit and len(prompt_index) >= limit:
                continue
            prompt_index[row["prompt"]] = len(prompt_index)
        i = prompt_index[row["prompt"]]
        ids = row.get("response_ids")
        if ids is None:
            ids = encode(tokenizer, row["response"])
        elif not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise DiagnoseError(f"{path}: 'response_ids' must be a list of integers")
        samples.append(Sample(i, count.get(i, 0), template_prompt(tokenizer, row["prompt"]), row["label"], list(ids)))
        count[i] = count.get(i, 0) + 1
    return samples


# ------------------------------------------------------------------------------------------- scoring
def score(task: str, prompt: str, response_text: str, label: Any) -> RewardVector:
    """The task's reward vector through its OpenRLHF ``reward_func`` (exactly what training receives)."""
    out = get_reward_func(task)([prompt + response_text], [prompt], [label])
    vec = parse_extra_logs(out["extra_logs"])
    if vec is None:
        raise DiagnoseError(f"the {task} reward_func returned no MRTPO reward vector")
    return vec


def constraint_specs(task: str, label: Any, n_rewards: int) -> list[tuple[str, dict] | None]:
    """(constraint id, kwargs) per reward index, for the ``target`` spans, from the task's ``constraint_specs``
    (None everywhere for a task without one)."""
    specs = get_task(task).function("constraint_specs")
    return specs(label, n_rewards) if specs is not None else [None] * n_rewards


# ------------------------------------------------------------------------------------------- pipeline
def replay_samples(
    model: Any,
    tokenizer: Any,
    samples: Sequence[Sample],
    vectors: Sequence[Any],
    null_text: str,
    temperature: float,
    micro_batch_size: int,
    chunk_size: int,
    relevance: str = DEFAULT_RELEVANCE,
    contrast_null: NullBlock | None = None,
) -> tuple[dict[int, torch.Tensor], dict[int, Any], dict[int, dict], dict[int, list]]:
    """Replay every response that has a reward with a verifier block, the null block(s) in its contexts, under the
    relevance measure ``relevance`` (the null rows too); a measure that contrasts with the null context gets
    ``contrast_null`` (the task's null block) added to each response's ``full`` as its extra context.

    Returns, by response index: q ``[num_rewards + 2, T]`` (the rewards', then the nulls' rows), its replay
    request, its nulls ({null name: row}) and its blocks' spans in the prompt (None: appended).
    """
    num_rewards = max((len(v.items) for v in vectors), default=0) + 2  # + the two nulls
    requests, rows, nulls_of, null_spans = [], [], {}, {}
    suffix = chat_suffix_text(tokenizer)
    for i, (s, vec) in enumerate(zip(samples, vectors)):
        ks = [k for k, item in enumerate(vec.items) if item.block]
        if ks and s.response_ids:
            prompt, blocks, spans, nulls = with_null_blocks(
                s.prompt, suffix, [it.block for it in vec.items], vec.spans, null_text
            )
            requests.append(
                request_from_text(
                    tokenizer,
                    prompt,
                    blocks,
                    s.response_ids,
                    ks + list(nulls.values()),
                    BLOCK_SEPARATOR,
                    spans=spans,
                    null=contrast_null,
                )
            )
            rows.append(i)
            nulls_of[i], null_spans[i] = nulls, spans
    q_by_row: dict[int, torch.Tensor] = {}
    if requests:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        q, _ = replay_relevance(
            model,
            requests,
            num_rewards,
            temperature=temperature,
            micro_batch_size=micro_batch_size,
            chunk_size=chunk_size,
            pad_token_id=pad,
            progress=True,
            relevance=relevance,
        )
        q_by_row = {i: q[r, :, : len(samples[i].response_ids)] for r, i in enumerate(rows)}
    return q_by_row, dict(zip(rows, requests)), nulls_of, null_spans


def response_records(
    tokenizer: Any, task: str, i: int, s: Sample, vec: Any, text: str, replay: tuple, null_text: str
) -> tuple[list[dict], dict]:
    """One response's records (one per reward, one per null) and its view for the page; ``replay`` is
    ``replay_samples``' result."""
    q_by_row, request_of, nulls_of, null_spans = replay
    full_text, offsets = token_char_offsets(tokenizer, s.response_ids)
    tokens = [tokenizer.decode([t], skip_special_tokens=False) for t in s.response_ids]
    specs = constraint_specs(task, s.label, len(vec.items))
    replayed = set(request_of[i].rewards) if i in request_of else set()
    nulls = nulls_of.get(i, {})
    base = {"response_index": i, "prompt_index": s.prompt_index, "sample": s.sample}
    records, rewards = [], []
    for k, item in enumerate(vec.items):
        q_k = q_by_row[i][k].tolist() if k in replayed else None
        spans = locate_spans(task, full_text, specs[k])
        masks = {kind: spans_to_token_mask(offsets, sp) for kind, sp in spans.items()}
        stats = pair_stats(q_k if q_k is not None else [0.0] * len(tokens), masks)
        null = (NULL_INLINE if null_spans[i][k] is not None else NULL_APPENDED) if k in replayed else None
        q_null = q_by_row[i][nulls[null]].tolist() if null in nulls and nulls[null] in replayed else None
        records.append(
            {
                **base,
                "reward": item.name,
                "value": float(item.value),
                "reason": item.reason,
                "block": item.block,
                "replayed": k in replayed,
                "tokens": tokens,
                "token_ids": list(s.response_ids),
                "q": q_k,
                "spans": {kind: [list(x) for x in sp] for kind, sp in spans.items()},
                "stats": stats,
                "null": null if q_null is not None else None,
                "controls": null_stats(q_null, masks, len(tokens), seed=i) if k in replayed else None,
            }
        )
        rewards.append(
            {
                "name": item.name,
                "value": item.value,
                "reason": item.reason,
                "block": item.block,
                "q": q_k,
                "stats": stats,
                "span_masks": masks,
            }
        )
    for name, index in nulls.items():
        q_null = q_by_row[i][index].tolist() if index in replayed else None
        records.append(
            {
                **base,
                "reward": name,
                "value": None,
                "reason": "null control: a sentence no reward reads",
                "block": null_text,
                "replayed": q_null is not None,
                "tokens": tokens,
                "token_ids": list(s.response_ids),
                "q": q_null,
                "spans": {},
                "stats": pair_stats(q_null if q_null is not None else [0.0] * len(tokens)),
                "null": True,
            }
        )
    view = {
        "prompt_index": s.prompt_index,
        "sample": s.sample,
        "prompt": s.prompt,
        "response_text": text,
        "tokens": tokens,
        "rewards": rewards,
    }
    return records, view


def diagnose_summary(records: list[dict], null_text: str) -> dict:
    """``stats.summarize`` of the replayed reward records, the pair counts, each reward group against its null
    (``null_control``) and the null's own profile (``null``)."""
    pairs = [r for r in records if r.get("null") is not True]
    summary = summarize([r for r in pairs if r["replayed"]])
    summary["pairs_total"] = len(pairs)
    summary["pairs_replayed"] = sum(r["replayed"] for r in pairs)
    by_group: dict[str, list[dict]] = {}
    for rec in pairs:
        if rec["replayed"]:
            by_group.setdefault(reward_group(rec["reward"]), []).append(rec)
    summary["null_control"] = {name: null_control(recs) for name, recs in by_group.items()} if null_text else {}
    null_recs = [r for r in records if r.get("null") is True and r["replayed"] and r["stats"]["total_distance"] > 0]
    summary["null"] = {
        "text": null_text,
        "modes": {m: sum(r["reward"] == m for r in null_recs) for m in (NULL_INLINE, NULL_APPENDED)},
        "tokens_for_80pct": interval(r["stats"]["tokens_for_80pct"] for r in null_recs),
    }
    return summary


def diagnose(
    model: Any,
    tokenizer: Any,
    task: str,
    samples: Sequence[Sample],
    temperature: float = 1.0,
    micro_batch_size: int = DEFAULT_REPLAY_MICRO_BATCH_SIZE,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    null_text: str = NULL_TEXT,
    relevance: str = DEFAULT_RELEVANCE,
) -> tuple[list[dict], list[dict], dict]:
    """Score and replay ``samples``, with the null block(s) of ``with_null_blocks`` (none if ``null_text`` is
    empty) in every replayed response's contexts, q by the relevance measure ``relevance`` (its heatmap and
    statistics; the null's rows by the same measure, beside each reward's). A measure with a null context takes the
    task's null block (``Task.null_block``, its text ``null_text``).

    Returns (records, responses, summary): one record per (response, reward) pair and one per (response, null)
    (the relevance.jsonl rows; a null's has ``"null": true``), the per-response view the page renders, and
    ``stats.summarize`` of the reward records plus ``null_control`` (each reward against its null and a random
    profile) and ``null`` (the null's own profile).
    """
    from tqdm.auto import tqdm

    texts, vectors = [], []
    for s in tqdm(samples, desc="score", unit="resp"):
        text = tokenizer.decode(s.response_ids, skip_special_tokens=False)
        texts.append(text)
        vectors.append(score(task, s.prompt, text, s.label))
    contrast_null = None
    if get_relevance(relevance).null_context:
        if not null_text:
            raise DiagnoseError(f"--relevance {relevance} contrasts with the null block: give it a text (--null)")
        contrast_null = NullBlock(null_text, get_task(task).null_position)
    replay = replay_samples(
        model, tokenizer, samples, vectors, null_text, temperature, micro_batch_size, chunk_size, relevance,
        contrast_null,
    )  # fmt: skip
    records, responses = [], []
    for i, (s, vec, text) in enumerate(zip(samples, vectors, texts)):
        recs, view = response_records(tokenizer, task, i, s, vec, text, replay, null_text)
        records += recs
        responses.append(view)
    return records, responses, diagnose_summary(records, null_text)


def write_outputs(
    out_dir: Path, records: Sequence[dict], responses: Sequence[dict], summary: dict, run_info: dict
) -> dict[str, Path]:
    """Write index.html, relevance.jsonl and summary.json into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "index.html", "jsonl": out_dir / "relevance.jsonl", "summary": out_dir / "summary.json"}
    write_jsonl(paths["jsonl"], records)
    paths["summary"].write_text(
        json.dumps({"run": run_info, **summary}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    paths["html"].write_text(render_page(summary, responses, run_info), encoding="utf-8")
    return paths


def run(
    model: str,
    data: str | None,
    out: str,
    responses: str | None = None,
    task: str | None = None,
    limit: int | None = None,
    samples_per_prompt: int = 2,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    seed: int = 0,
    micro_batch_size: int = 4,
    null_text: str | None = None,
    relevance: str = DEFAULT_RELEVANCE,
) -> dict[str, Path]:
    """Everything ``python -m mrtpo_openrlhf.diagnose`` does; returns the written paths."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if samples_per_prompt < 1 or max_new_tokens < 1 or (limit is not None and limit < 1):
        raise DiagnoseError("--samples-per-prompt, --max-new-tokens and --limit must be >= 1")
    if temperature < 0:
        raise DiagnoseError("--temperature must be >= 0")
    if temperature == 0 and samples_per_prompt > 1 and responses is None:
        raise DiagnoseError("--temperature 0 (greedy) gives identical samples: use --samples-per-prompt 1")
    if responses is not None and not Path(responses).expanduser().is_file():
        raise DiagnoseError(f"--responses {responses!r}: no such file")
    data_path = None
    if responses is None or data is not None:
        if data is None:
            raise DiagnoseError("--data is required unless --responses is given")
        data_path, task = resolve_data(data, task)
    elif task is None:
        task = infer_task(load_rows(Path(responses).expanduser(), 1, need=("prompt", "response", "label"))[0]["label"])
    elif task not in TASKS:
        raise DiagnoseError(f"--task {task!r}: choose from {', '.join(sorted(TASKS))}")
    if null_text is None:  # the task's null block (Task.null_text; the shared sentence by default)
        null_text = get_task(task).null_block().text
    get_relevance(relevance)
    model_path = resolve_model(model)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    lm = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32).eval()
    if responses is not None:
        samples = read_samples(tokenizer, Path(responses).expanduser(), limit)
        source = display_path(responses)
    else:
        rows = load_rows(data_path, limit)
        samples = generate_samples(lm, tokenizer, rows, samples_per_prompt, max_new_tokens, temperature, seed)
        source = display_path(data_path)
    replay_temperature = temperature if temperature > 0 else 1.0
    records, views, summary = diagnose(
        lm, tokenizer, task, samples, replay_temperature, micro_batch_size, null_text=null_text, relevance=relevance
    )
    run_info = {
        "model": model if model == "smollm2" else display_path(model_path),
        "task": task,
        "data": source,
        "responses": len(samples),
        "pairs replayed": f"{summary['pairs_replayed']}/{summary['pairs_total']}",
        "temperature": temperature,
        "null block": null_text or "off",
        **({"relevance": relevance} if relevance != DEFAULT_RELEVANCE else {}),  # js: the pages as they were
        "seconds": round(time.time() - t0, 1),
    }
    return write_outputs(Path(out).expanduser(), records, views, summary, run_info)
