"""Sessions of a campaign admit and search in worker threads at the same time, so the server's ``ast.parse`` calls
overlap. On CPython 3.11 that can raise ``SystemError: AST constructor recursion depth mismatch`` for a file that
parses (gh-106905; it failed one operator of the six-operator campaign test once). ``tools/code/pysource.parse`` holds
a lock while a tree is built; the server parses only through it."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

from pypto_tune.tools.code import pysource

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "tools" / "patching" / "roles.py").read_text()


class _Finalised:
    def __del__(self) -> None:  # a finaliser run by a collection mid-parse is where the threads switch
        pass


def _parse_in_threads(parse, threads: int = 3, each: int = 10) -> list[str]:
    """The conditions that show the race within seconds: a tiny switch interval, frequent collections and cyclic
    garbage with finalisers made by another thread."""
    errors: list[str] = []
    stop = threading.Event()

    def garbage() -> None:
        while not stop.is_set():
            a, b = _Finalised(), _Finalised()
            a.other, b.other = b, a  # type: ignore[attr-defined]

    def work() -> None:
        for _ in range(each):
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 2, 2)
    maker = threading.Thread(target=garbage)
    workers = [threading.Thread(target=work) for _ in range(threads)]
    try:
        maker.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        stop.set()
        maker.join()
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    return errors


def test_parsing_in_several_threads_at_once_never_fails_on_a_file_that_parses():
    assert _parse_in_threads(pysource.parse) == []


def test_the_server_parses_python_only_through_the_locked_parser():
    found = subprocess.run(["grep", "-rn", "--include=*.py", r"ast\.parse(", "tools", "server"], cwd=ROOT,
                           capture_output=True, text=True).stdout.splitlines()
    assert [line for line in found if not line.startswith("tools/code/pysource.py:")] == []


def test_a_byte_order_mark_is_dropped_and_eval_mode_is_kept():
    assert pysource.parse("\ufeffx = 1").body[0].targets[0].id == "x"  # type: ignore[attr-defined]
    assert type(pysource.parse("a + 1", mode="eval").body).__name__ == "BinOp"  # type: ignore[attr-defined]
