"""``study run --expect-base``: a base model whose weights hash is not the expected one stops the study before any
run starts (its runs would not pair with the ones made on the expected base)."""

import hashlib
import json

import pytest

from mrtpo_openrlhf.launch import write_prompt_jsonl
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.study import runner
from mrtpo_openrlhf.study.__main__ import main


def tiny_study(tmp_path):
    model = make_tiny_model(tmp_path / "model", seed=0)
    label = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    data = write_prompt_jsonl(tmp_path / "rows.jsonl", ["Say hi.", "Name a color."], [json.dumps(label)] * 2)
    config = tmp_path / "s.toml"
    config.write_text(f'''[study]
name = "s"
task = "instruction"
data = "{data}"
model = "{model}"
arms = ["mrtpo"]
seeds = [1]
steps = 1
prompts_per_step = 2
samples_per_prompt = 2
max_new_tokens = 8
''')
    # the documented hash, computed here by hand: sha256 over the hex sha256 of each safetensors file, by name
    files = sorted(model.glob("*.safetensors"))
    sha = hashlib.sha256("".join(hashlib.sha256(f.read_bytes()).hexdigest() for f in files).encode()).hexdigest()
    return config, sha


def test_another_base_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    config, sha = tiny_study(tmp_path)
    started = []
    monkeypatch.setattr(runner, "_run_one", lambda cfg, arm, seed, *a, **k: started.append((arm, seed)) or False)
    wrong = ("0" if sha[0] != "0" else "1") + sha[1:12]
    out = tmp_path / "study"
    args = ["run", str(config), "--out", str(out), "--results", "none"]
    assert main([*args, "--expect-base", wrong]) == 2
    err = capsys.readouterr().err
    assert f"weights sha256 {sha[:12]}, not the expected {wrong}" in err
    assert started == [] and not (out / "mrtpo").exists()
    # the right prefix, in capitals: the runs start
    assert main([*args, "--expect-base", sha[:8].upper()]) == 1  # the stubbed run reports a failure
    assert started == [("mrtpo", 1)]
    assert f"weights sha256 {sha[:12]}" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["abc", "zz3456789", ""])
def test_expect_base_must_be_hex(tmp_path, capsys, value):
    config, _ = tiny_study(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["run", str(config), "--results", "none", "--expect-base", value])
    assert stop.value.code == 2
    assert "expected 8 or more hex digits of a sha256" in capsys.readouterr().err
