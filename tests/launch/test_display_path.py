"""Generated pages show paths relative to the user's folder or the repo, never the author's absolute layout."""

from pathlib import Path

from mrtpo_openrlhf.paths import REPO_ROOT, display_path


def test_inside_working_directory_is_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert display_path(tmp_path / "data" / "x.jsonl") == "data/x.jsonl"
    assert display_path(tmp_path) == "."


def test_inside_repo_is_relative_to_the_repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert display_path(REPO_ROOT / "mrtpo_openrlhf" / "data") == "mrtpo_openrlhf/data"


def test_home_is_abbreviated_and_elsewhere_is_kept(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "home" / "runs")
    monkeypatch.setenv("HOME", str(home))
    assert display_path(home / "models" / "m") == str(Path("~") / "models" / "m")
    assert display_path("/nonexistent-root/x") == "/nonexistent-root/x"
