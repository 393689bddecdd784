"""Re-record the real SIM outputs the verdict tests judge. Run from anywhere; works in a scratch dir under /tmp.

    /work/main/.venv/bin/python tests/running/data/record_outputs.py

Writes sim_probe_passed.out (probe + PRECISION line) and sim_probe_no_verdict.out (the probe as given, which
prints only "done"), sim_probe_compile_failure.out (a vec_nbuffer setting 0.2.0 cannot compile), each with a first line "# exit <code>"."""
import sys
import tempfile
from pathlib import Path

import anyio

from pypto_tune.tools.running.runner import build_child_env, run_command

HERE = Path(__file__).resolve().parent


async def main() -> None:
    for name, extra in (("sim_probe_passed.out", ["--verdict"]), ("sim_probe_no_verdict.out", []),
                        ("sim_probe_compile_failure.out", ["--verdict", "--broken-nbuffer"])):
        with tempfile.TemporaryDirectory(prefix="pypto-tune-rec-") as tmp:
            r = await run_command([sys.executable, str(HERE / "probe_add_verdict.py"), *extra], cwd=Path(tmp),
                                  env=build_child_env(run_mode="sim"), timeout_s=120)
        # The run folder name carries a timestamp and pid: normalise the scratch path so the file is stable.
        text = r.output.replace(tmp, "/tmp/SCRATCH")
        (HERE / name).write_text(f"# exit {r.exit_code}\n{text}")
        print(name, r.exit_code, r.duration_s, r.output_bytes)


anyio.run(main)
