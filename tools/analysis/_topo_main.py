"""Entry point of the dyn_topo worker process: ``python -m pypto_tune.tools.analysis._topo_main FILE``.

A module of its own so that ``-m`` does not re-execute ``topo_worker``, which the package has already imported.
"""

import sys

from pypto_tune.tools.analysis.topo_worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
