"""Converters never lose data: same-file refusal, atomic replacement of the output, UTF-8 errors named."""

import json

import pytest

from mrtpo_openrlhf.data.jsonl import DatasetError, read_jsonl, write_jsonl
from mrtpo_openrlhf.tasks.instruction import reward as instruction
from mrtpo_openrlhf.tasks.sql import reward as sql
from mrtpo_openrlhf.tasks.tool import reward as tool

FUNCS = [{"name": "add", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}]


def tool_row(i):
    return {
        "id": f"simple_python_{i}",
        "question": [[{"role": "user", "content": f"add {i}"}]],
        "function": FUNCS,
        "ground_truth": [{"add": {"a": [i]}}],
    }


def instruction_row(i):
    return {"key": i, "prompt": f"Say {i}. No commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


def write_lines(path, rows):
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))


def run_tool(src, out, *more):
    return tool.main(["convert", "--input", str(src), "--out", str(out), *more])


def run_instruction(src, out, *more):
    return instruction.main(["convert", "--format", "ifeval", "--input", str(src), "--out", str(out), *more])


CONVERTERS = [(run_tool, tool_row), (run_instruction, instruction_row)]


@pytest.mark.parametrize("run, make_row", CONVERTERS)
def test_out_equal_to_input_is_refused_and_input_kept(tmp_path, run, make_row, capsys):
    src = tmp_path / "rows.jsonl"
    write_lines(src, [make_row(i) for i in range(6)])
    before = src.read_bytes()
    assert run(src, src) == 2
    assert run(src, tmp_path / "." / "rows.jsonl") == 2  # another spelling of the same path
    (tmp_path / "link.jsonl").symlink_to(src)
    assert run(src, tmp_path / "link.jsonl") == 2
    assert src.read_bytes() == before and "is the input file" in capsys.readouterr().err


@pytest.mark.parametrize("run, make_row", CONVERTERS)
def test_failed_run_keeps_the_previous_output(tmp_path, run, make_row):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(src, [make_row(i) for i in range(3)])
    assert run(src, out) == 0
    previous = out.read_bytes()
    assert len(read_jsonl(out)) == 3
    # rows 1-4 convert, row 5 is malformed: the old output must survive, with no temporary file left behind
    good_rows = b"".join(json.dumps(make_row(i)).encode() + b"\n" for i in range(4))
    src.write_bytes(good_rows + b'{"id": 5, "question": 3}\n')
    assert run(src, out, "--overwrite") == 2
    assert out.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]


@pytest.mark.parametrize("run, make_row", CONVERTERS)
def test_invalid_utf8_names_file_and_line(tmp_path, run, make_row, capsys):
    src = tmp_path / "in.jsonl"
    src.write_bytes(json.dumps(make_row(1)).encode() + b"\n" + b'{"prompt": "caf\xe9"}\n')
    assert run(src, tmp_path / "out.jsonl") == 2
    err = capsys.readouterr().err
    assert f"{src}:2: invalid UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_shared_loader_names_file_and_line_for_invalid_utf8(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": "\xff\xfe"}\n')
    with pytest.raises(DatasetError, match=r"x\.jsonl:3: invalid UTF-8"):
        read_jsonl(path)
    path.write_bytes(b"[" * 100_000 + b"\n")
    with pytest.raises(DatasetError, match=r"x\.jsonl:1: JSON nested too deeply"):
        read_jsonl(path)


def test_write_jsonl_is_atomic_when_rows_raise(tmp_path):
    out = tmp_path / "out.jsonl"
    write_jsonl(out, [{"a": 1}])

    def rows():
        yield {"a": 2}
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        write_jsonl(out, rows())
    assert read_jsonl(out) == [{"a": 1}] and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_sql_converter_refuses_same_file_and_names_bad_utf8(tmp_path, capsys):
    src = tmp_path / "train.json"
    src.write_bytes(b'[\n{"db_id": "school",\n "question": "caf\xe9", "query": "SELECT 1"}]')
    args = ["convert", "--format", "spider", "--input", str(src), "--db-root", str(sql.BUNDLED_DB_ROOT)]
    assert sql.main(args + ["--out", str(src)]) == 2
    assert src.read_bytes().startswith(b"[\n{") and "is the input file" in capsys.readouterr().err
    assert sql.main(args + ["--out", str(tmp_path / "rows.jsonl")]) == 2
    assert f"{src}:3: invalid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("run, make_row", CONVERTERS)
def test_an_existing_out_is_replaced_only_with_overwrite(tmp_path, run, make_row, capsys):
    """Issue 49, item 11: the converters replaced an existing ``--out`` without asking."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(src, [make_row(i) for i in range(3)])
    out.write_text("my earlier rows\n")
    assert run(src, out) == 2
    assert out.read_text() == "my earlier rows\n" and f"{out} exists: pass --overwrite" in capsys.readouterr().err
    assert run(src, out, "--overwrite") == 0 and len(read_jsonl(out)) == 3


def test_sql_converter_refuses_an_existing_out_without_overwrite(tmp_path, capsys):
    src, out = tmp_path / "train.json", tmp_path / "rows.jsonl"
    src.write_text(json.dumps([{"db_id": "school", "question": "q", "query": "SELECT 1"}]))
    out.write_text("keep\n")
    args = ["convert", "--format", "spider", "--input", str(src), "--db-root", str(sql.BUNDLED_DB_ROOT)]
    assert sql.main(args + ["--out", str(out)]) == 2 and out.read_text() == "keep\n"
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert sql.main(args + ["--out", str(out), "--overwrite"]) == 0 and len(read_jsonl(out)) == 1


def test_invalid_json_names_its_column_once(tmp_path):
    """Issue 49, item 11: json's "Unterminated string starting at" read "... starting at at column 16"."""
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"prompt": "abc')  # json: "Unterminated string starting at" (the column follows)
    with pytest.raises(DatasetError) as err:
        read_jsonl(path)
    assert str(err.value) == f"{path}:2: invalid JSON (Unterminated string starting at column 12)"
    path.write_text('{"a": }\n')
    with pytest.raises(DatasetError, match=r"x\.jsonl:1: invalid JSON \(Expecting value at column 7\)$"):
        read_jsonl(path)
