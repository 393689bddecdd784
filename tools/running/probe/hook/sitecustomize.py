"""pypto-tune's probe hook (server-owned; the server puts this folder first on the run's PYTHONPATH).

Python imports the first ``sitecustomize`` on sys.path, so this one shadows any other (Debian ships one, a venv may
have one). It installs the probe (``pypto_tune_probe.py`` beside it), takes its own folder off ``sys.path`` so the
kernel imports exactly what it would without the probe, then runs the sitecustomize it shadowed under the same
name — with that module's own exceptions, which ``site`` reports as it always does.
"""

import os
import sys


def _run() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import pypto_tune_probe

        pypto_tune_probe.install(here)
    except Exception:
        pass  # fail quiet: without the probe the run is what it always was; the server says the probe did not report
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
