"""``study run`` for real on the tiny test model: 1 arm, 1 seed, 1 step through the CPU OpenRLHF path; then a
second call finds it done (in the committed results folder) and starts nothing."""

import json

import pytest

from mrtpo_openrlhf.launch import write_prompt_jsonl
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.study.__main__ import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("vllm")


def test_study_run_one_step_then_resume_skips(tmp_path, capsys):
    model = make_tiny_model(tmp_path / "model", seed=0)
    label = {"instruction_id_list": ["punctuation:no_comma", "startend:quotation"], "kwargs": [{}, {}]}
    data = write_prompt_jsonl(
        tmp_path / "rows.jsonl", ["Say hi. Do not use commas.", "Name a color."], [json.dumps(label)] * 2
    )
    config = tmp_path / "smoke.toml"
    config.write_text(f'''[study]
name = "smoke"
task = "instruction"
data = "{data}"
model = "{model}"
arms = ["mrtpo"]
seeds = [5]
steps = 1
prompts_per_step = 2
samples_per_prompt = 2
max_new_tokens = 16
prompt_draw = "per_seed"
heldout = "{data}"
heldout_prompts = 2
heldout_samples = 2
''')
    out, results = tmp_path / "study", tmp_path / "results"
    assert main(["run", str(config), "--out", str(out), "--results", str(results)]) == 0
    run = out / "mrtpo" / "seed5"
    for name in ("config.json", "command.txt", "metrics.jsonl", "result.json", "heldout.json", "run.json"):
        assert (run / name).is_file() and (results / "runs" / "mrtpo" / "seed5" / name).is_file(), name
    assert "--train.seed 5" in (run / "command.txt").read_text()
    drawn = out / "prompts" / "seed5.jsonl"
    assert f"--data.prompt_dataset {drawn}" in (run / "command.txt").read_text()
    assert sorted(json.loads((results / "prompts" / "seed5.json").read_text())["indices"]) == [0, 1]
    heldout = json.loads((run / "heldout.json").read_text())
    assert heldout["responses"] == 4 and set(heldout["rewards"]) == {"punctuation:no_comma", "startend:quotation"}
    provenance = json.loads((run / "run.json").read_text())["provenance"]
    assert len(provenance["commit"]) == 40 and provenance["training_path"]
    step = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert "reward/punctuation:no_comma/mean" in step
    capsys.readouterr()
    # a new sitting on a fresh machine: only the committed results remain
    assert main(["run", str(config), "--out", str(tmp_path / "fresh"), "--results", str(results)]) == 0
    assert "1 runs (1 already done)" in capsys.readouterr().out
    assert not (tmp_path / "fresh" / "mrtpo").exists()
    assert main(["report", str(results), "--out", str(tmp_path / "report")]) == 0
