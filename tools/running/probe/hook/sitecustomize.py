"""pypto-tune's probe hook (server-owned; the server puts this folder first on the run's PYTHONPATH).

Python imports the first ``sitecustomize`` on sys.path, so this one shadows any other (Debian ships one, a venv may
have one). It takes its own folder off ``sys.path`` (the kernel imports exactly what it would without the probe),
arms a finder that loads the probe (``pypto_tune_probe.py`` beside it) only when the process imports ``pypto`` —
pypto's helper scripts and any other Python process of the run pay nothing more — then runs the sitecustomize it
shadowed under the same name, with that module's own exceptions, which ``site`` reports as it always does.
"""

import os
import sys


class _WhenPypto:
    """Loads the probe the first time anything looks for ``pypto``, then steps aside for the probe's own finder."""

    def __init__(self, here: str) -> None:
        self.here = here

    def find_spec(self, name, path=None, target=None):
        if name != "pypto":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            import importlib.util
            import time

            t0 = time.perf_counter()
            spec = importlib.util.spec_from_file_location("pypto_tune_probe",
                                                          os.path.join(self.here, "pypto_tune_probe.py"))
            probe = importlib.util.module_from_spec(spec)
            sys.modules["pypto_tune_probe"] = probe
            spec.loader.exec_module(probe)
            armed = probe.install(self.here)
            if probe._P is not None:
                probe._P.self_s += time.perf_counter() - t0  # loading the probe counts as its cost
            if armed:
                return probe.after_pypto_finder().find_spec(name, path, target)
        except Exception:
            pass  # fail quiet: without the probe the run is what it always was; the server says it did not report
        return None


def _run() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("PYPTO_TUNE_PROBE_DIR"):
        sys.meta_path.insert(0, _WhenPypto(here))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return  # nothing shadowed (this module stays as sitecustomize: the import system expects it there)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_run()
