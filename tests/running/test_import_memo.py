"""The checklist's remembered ``import pypto`` answer: kept under the interpreter's digest, the interpreter and the
run environment; refused when its seal does not match or the workspace could shadow a module the import loaded."""

from __future__ import annotations

from pathlib import Path

import orjson

from pypto_tune.tools.running.import_memo import ImportAnswer, ImportMemo, memo_key

KEY = b"k" * 32
ANSWER = ImportAnswer(pypto="pypto 0.2.0 from /venv/pypto/__init__.py", options=["runtime.run_mode"],
                      modules=["numpy", "pypto", "sympy", "torch"], at="2026-12-06T23:00:00+00:00")


def _memo(tmp_path: Path, key: str = "a" * 64, seal_key: bytes = KEY, folders: list[Path] | None = None) -> ImportMemo:
    return ImportMemo(key=key, seal_key=seal_key, path_folders=folders or [tmp_path / "ws"], folder=tmp_path / "memo")


def test_an_answer_is_recalled_under_its_key_only(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    _memo(tmp_path).remember(ANSWER)
    assert _memo(tmp_path).recall() == ANSWER
    other = _memo(tmp_path, key="b" * 64)
    assert other.recall() is None and other.missed == "not asked before for this interpreter and environment"


def test_the_key_moves_with_the_digest_the_interpreter_and_any_environment_variable() -> None:
    base = memo_key(python="/venv/bin/python", interpreter_digest="d1", env={"PATH": "/bin", "A": "1"})
    assert base == memo_key(python="/venv/bin/python", interpreter_digest="d1", env={"A": "1", "PATH": "/bin"})
    assert base != memo_key(python="/venv/bin/python", interpreter_digest="d2", env={"PATH": "/bin", "A": "1"})
    assert base != memo_key(python="/other/bin/python", interpreter_digest="d1", env={"PATH": "/bin", "A": "1"})
    assert base != memo_key(python="/venv/bin/python", interpreter_digest="d1",
                            env={"PATH": "/bin", "A": "1", "LD_LIBRARY_PATH": "/x"})


def test_an_edited_answer_or_another_seal_key_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    memo = _memo(tmp_path)
    memo.remember(ANSWER)
    stored = orjson.loads(memo._file.read_bytes())
    forged = orjson.loads(stored["answer"])
    forged["options"].append("runtime.max_workspace_kb")
    memo._file.write_bytes(orjson.dumps({"answer": orjson.dumps(forged).decode(), "mac": stored["mac"]}))
    assert memo.recall() is None and memo.missed == "the remembered answer's seal does not match"
    memo.remember(ANSWER)
    stranger = _memo(tmp_path, seal_key=b"s" * 32)
    assert stranger.recall() is None and "seal" in stranger.missed
    memo._file.write_text("not json")
    assert memo.recall() is None and memo.missed == "the remembered answer is unreadable"


def test_a_workspace_entry_named_like_a_loaded_module_makes_the_checklist_ask_again(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "softmax.py").write_text("")
    _memo(tmp_path).remember(ANSWER)
    assert _memo(tmp_path).recall() == ANSWER
    for shadow in ("torch.py", "sympy", "numpy.cpython-311-x86_64-linux-gnu.so"):
        path = ws / shadow
        path.mkdir() if "." not in shadow else path.write_text("")
        memo = _memo(tmp_path)
        assert memo.recall() is None and shadow in memo.missed, (shadow, memo.missed)
        path.rmdir() if path.is_dir() else path.unlink()
    inside = ws / "lib"
    inside.mkdir()
    (inside / "pypto.py").write_text("")
    assert _memo(tmp_path, folders=[ws, inside]).recall() is None


def test_an_unwritable_memo_folder_only_means_the_next_session_asks(tmp_path: Path) -> None:
    (tmp_path / "memo").write_text("a file where the folder should be")
    memo = _memo(tmp_path)
    memo.remember(ANSWER)
    assert memo.recall() is None
