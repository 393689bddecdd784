"""What a sealed run's handback costs the server, on a real SIM output folder, against the unsealed run's work.

A sealed run (``tools/running/handback.py``) hands its copy and output folders back as a tar stream through a socket
after the command: tar in the sandbox, the server drains the socket, unpacks the folders and digests them from the
stream. The unsealed run wrote its folders straight into a host folder, which the server then digested
(``execution.dir_digest``) and moved. Both are timed here on the same folder, interleaved (the run itself is not:
``sandbox_bench.py`` times whole runs, which on a loaded shared machine drown a difference of this size in noise).
The feed side is timed too: one sealed memfd per recorded file.

Usage: python benchmarks/handback_bench.py OUTPUT_FOLDER [-n 20] [--files 200]
    (an ``output_*`` folder of a SIM run, e.g. one ``python fixtures/operators/softmax/softmax.py --run-mode sim``
    leaves in ``output/``)
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    from pypto_tune.tools.code.codestate import ExecFile
    from pypto_tune.tools.running import execution
    from pypto_tune.tools.running.handback import unpack

    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("folder", type=Path)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--files", type=int, default=200, help="recorded files to feed (4 kB each)")
    args = p.parse_args()
    src = args.folder.resolve()
    size = sum(f.stat().st_size for f in src.rglob("*") if f.is_file())
    times: dict[str, list[float]] = {"sealed handback": [], "unsealed digest + move": [], "feeds": []}
    with tempfile.TemporaryDirectory(prefix="handback-bench-") as d:
        ws = Path(d) / "ws"
        (ws / "output").mkdir(parents=True)
        for i in range(args.n + 1):
            shutil.copytree(src, ws / "output" / src.name)  # as the run left it
            t0 = time.perf_counter()
            mine, theirs = socket.socketpair()
            tar = subprocess.Popen(["tar", "-c", "-f", "-", "-C", d, f"ws/output/{src.name}"], stdout=theirs)
            theirs.close()
            buf = bytearray()
            while chunk := mine.recv(1 << 20):
                buf += chunk
            tar.wait()
            mine.close()
            back = unpack(io.BytesIO(bytes(buf)), copy_prefix="ws", capture_prefix=None, files={},
                          output_dest=Path(d) / "sealed" / "output", capture_max_bytes=0)
            sealed = time.perf_counter() - t0
            assert back.digests, back.error
            t0 = time.perf_counter()
            execution.dir_digest(ws / "output" / src.name)
            shutil.move(str(ws / "output" / src.name), str(Path(d) / src.name))
            unsealed = time.perf_counter() - t0
            files = {f"pkg/f{j}.py": ExecFile(data=b"x" * 4096) for j in range(args.files)}
            t0 = time.perf_counter()
            _, fds = execution._feeds(files)
            feeds = time.perf_counter() - t0
            for fd in fds:
                os.close(fd)
            shutil.rmtree(Path(d) / "sealed")
            shutil.rmtree(Path(d) / src.name)
            if i > 0:
                times["sealed handback"].append(sealed)
                times["unsealed digest + move"].append(unsealed)
                times["feeds"].append(feeds)
    a, b = statistics.median(times["sealed handback"]), statistics.median(times["unsealed digest + move"])
    print(f"output folder {src.name}: {size / 1e6:.1f} MB in {sum(1 for f in src.rglob('*') if f.is_file())} files")
    print(f"sealed handback (tar in a child, socket, unpack + digest) {a * 1000:.1f} ms; unsealed digest + move "
          f"{b * 1000:.1f} ms (median of {args.n}) — the sealed run adds {(a - b) * 1000:+.1f} ms")
    print(f"feeding {args.files} recorded files (sealed memfds): {statistics.median(times['feeds']) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
