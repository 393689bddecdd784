"""What an agent of the server's own account can do to a running sandbox, as tests play it: find the copy of a
running sealed run and write into it, or plant bytecode beside its module (issue #32's attack).

The sealed run's copy lives in no host folder; a process of the same account can still name it through
``/proc/<pid>/root`` of a process inside the sandbox (the README names this), where it is a read-only mount.
"""

from __future__ import annotations

import errno
import importlib.util
import os
from pathlib import Path

PYC_TAG = importlib.util.cache_from_source("m.py").split("/")[-1][1:]  # ".cpython-311.pyc"


def sandboxed_copies(ws: Path, name: str) -> list[Path]:
    """``/proc/<pid>/root<ws>/<name>`` of every process whose root holds another ``name`` there than the host (a
    running sandbox's copy)."""
    found = []
    host = os.stat(ws).st_dev
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        path = Path(f"/proc/{pid}/root{ws}/{name}")
        try:
            if path.is_file() and os.stat(path.parent).st_dev != host:
                found.append(path)
        except OSError:
            continue
    return found


def host_copies(ws: Path, name: str) -> list[Path]:
    """Files called ``name`` in the run folders under ``WS/.pypto-tune/exec/`` (where an unsealed run's copy was)."""
    return sorted((ws / ".pypto-tune" / "exec").glob(f"*/{name}"))


def plant_pyc(module: Path, source: str, *, compiled_as: str) -> str:
    """Write ``__pycache__/<stem>.cpython-3XX.pyc`` beside ``module``, compiled from ``source`` with the header Python
    checks (the module's modification time and size, read with ``stat``), so an import of the module runs
    ``source``. Returns "written" or the operating system's refusal (``os.strerror``)."""
    import importlib._bootstrap_external as ext

    try:
        st = module.stat()
        code = compile(source, compiled_as, "exec", dont_inherit=True)
        data = ext._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
        cache = module.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / (module.stem + PYC_TAG)).write_bytes(bytes(data))
        return "written"
    except OSError as exc:
        return os.strerror(exc.errno or errno.EIO)


def write(path: Path, text: str) -> str:
    """Write ``text`` to ``path``: "written", or the operating system's refusal."""
    try:
        path.write_text(text)
        return "written"
    except OSError as exc:
        return os.strerror(exc.errno or errno.EIO)
