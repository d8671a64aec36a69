"""``python -m mrtpo_openrlhf.plot`` on synthetic metrics files."""

import json

from mrtpo_openrlhf.cli.plot import main, read_metrics, select_keys


def _write(path, rows, torn_tail=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text + ('{"step": 9, "rew' if torn_tail else ""))


def _rows(speed, mrtpo):
    rows = []
    for s in range(1, 16):
        r = {
            "step": s,
            "reward/format/mean": min(1.0, speed * s),
            "reward/execution/mean": speed * s / 3,
            "mrtpo/beta": min(s / 10, 1) * 0.5,
            "note": "text is ignored",
        }
        if mrtpo:
            r["mrtpo/replayed_pairs_frac"] = 0.2 - 0.005 * s
            r["mrtpo/replay_share_of_step"] = 0.15
        rows.append(r)
    return rows


def test_two_runs_make_a_png(tmp_path, capsys):
    _write(tmp_path / "gdpo" / "metrics.jsonl", _rows(0.04, False))
    _write(tmp_path / "mrtpo" / "metrics.jsonl", _rows(0.08, True), torn_tail=True)
    out = tmp_path / "curves.png"
    assert main([str(tmp_path / "gdpo"), str(tmp_path / "mrtpo" / "metrics.jsonl"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000
    assert "4 panels, 2 runs" in capsys.readouterr().out  # 2 rewards + 2 replay panels, beta not by default


def test_key_selection_and_reading(tmp_path):
    _write(tmp_path / "a.jsonl", _rows(0.1, True), torn_tail=True)
    rows = read_metrics(tmp_path / "a.jsonl")
    assert len(rows) == 15 and "note" not in rows[0]
    assert select_keys([rows], ["reward/*/mean", "mrtpo/beta", "missing/key"]) == [
        "reward/execution/mean",
        "reward/format/mean",
        "mrtpo/beta",
    ]


def test_errors(tmp_path, capsys):
    out = str(tmp_path / "x.png")
    assert main([str(tmp_path / "nope"), "--out", out]) == 2
    assert "no such metrics file" in capsys.readouterr().err
    (tmp_path / "empty.jsonl").write_text("\n")
    assert main([str(tmp_path / "empty.jsonl"), "--out", out]) == 2
    assert "empty metrics file" in capsys.readouterr().err
    _write(tmp_path / "a.jsonl", _rows(0.1, False))
    assert main([str(tmp_path / "a.jsonl"), "--out", out, "--labels", "one", "two"]) == 2
    assert main([str(tmp_path / "a.jsonl"), "--out", out, "--keys", "nothing/*"]) == 2
    assert "no metric to plot" in capsys.readouterr().err


def test_step_ticks_are_whole_numbers():
    """Issue 49, item 11: a 4-step run's curves had ticks at 1.5, 2.5, ..."""
    from mrtpo_openrlhf.cli.plot import figure

    rows = [{"step": float(s), "reward/format/mean": s / 4} for s in range(1, 5)]
    fig = figure([rows], ["run"], ["reward/format/mean"])
    fig.canvas.draw()
    ticks = [t for t in fig.axes[0].get_xticks() if 1 <= t <= 4]
    assert ticks and all(t == int(t) for t in ticks), ticks
