"""The run-time probe: what a PyPTO test actually ran, recorded from inside its Python process (issue #17).

``hook/`` is installed into the run (``sitecustomize`` first on PYTHONPATH, from this server-owned folder, through
the run sandbox's hooks); it writes one JSON record per Python process that imported pypto into the run's capture
folder. :func:`parse_records` (or :func:`read_records` for a folder) turns those files into a typed
:class:`ProbeRecord`: the kernels called (input shapes and dtypes, options, compiled/ran), every tiling, option,
loop and view call with its call site and effective values, the kernel-body statements pypto's parser traced, the
run's ``sys.path`` and imported files. The knob map (``tools/patching/runmap.py``) joins it with the source text.
"""

from .models import Frame, ProbeCall, ProbeKernel, ProbeRecord, ProbeStatus, TensorArg
from .reader import DIR_ENV, HOOK_DIR, parse_records, probe_env, read_records

__all__ = ["DIR_ENV", "Frame", "HOOK_DIR", "ProbeCall", "ProbeKernel", "ProbeRecord", "ProbeStatus", "TensorArg",
           "parse_records", "probe_env", "read_records"]
