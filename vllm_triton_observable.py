"""The one package the backend installs as, beside Triton's `model.py`: `<backends>/vllm/vllm_triton_observable/`.

It holds the rooms Triton loads — `backend`, `common`, `health`, `metrics`, `tracing` — under a name no other
module uses, so nothing generic lands on the stub's `sys.path`. In the repository the rooms sit at the top level;
this module makes them importable under the installed name (the installer copies it as the package's
`__init__.py`), so the tests import exactly what Triton loads.
"""

import os

__path__ = [os.path.dirname(os.path.abspath(__file__))]
__version__ = "0.1.0"
