"""What writing without following links costs: a run copy materialised through directory descriptors
(``tools/patching/nofollow.py``, as ``codestate.materialize`` does now) against plain path writes (as it did before),
interleaved in one run on the same tree.

    .venv/bin/python benchmarks/nofollow_bench.py [--files 200] [--repeats 15]

Prints the median time of each and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pypto_tune.tools.patching.nofollow import open_tree


def tree(n: int) -> dict[str, bytes]:
    """A workspace-like tree: a few folders, Python sources and small data files (4 KiB each)."""
    return {f"pkg{i % 7}/sub{i % 3}/file{i}.py": os.urandom(2048).hex().encode() for i in range(n)}


def by_path(dest: Path, files: dict[str, bytes]) -> None:
    dest.mkdir()
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def by_descriptor(dest: Path, files: dict[str, bytes]) -> None:
    dest.mkdir()
    with open_tree(dest) as t:
        for rel, data in files.items():
            t.write(rel, data, durable=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    files = tree(args.files)
    times: dict[str, list[float]] = {"path": [], "descriptor": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name, fn in (("path", by_path), ("descriptor", by_descriptor)):
                dest = Path(tmp) / f"{name}-{i}"
                t0 = time.perf_counter()
                fn(dest, files)
                times[name].append(time.perf_counter() - t0)
                shutil.rmtree(dest)
    a, b = statistics.median(times["path"]), statistics.median(times["descriptor"])
    print(f"{args.files} files, median of {args.repeats}: path writes {a * 1000:.1f} ms, "
          f"no-follow writes {b * 1000:.1f} ms, ratio {b / a:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
