"""Triton's entry point for `backend: "vllm"` (installed as `<backends>/vllm/model.py`): a thin adapter."""

import locale

# The Python stub embeds CPython without setting the locale, so open() would default to ASCII and
# importing vLLM (which reads UTF-8 files) would fail. This must run before anything imports vLLM.
for _name in ("", "C.UTF-8"):
    try:
        locale.setlocale(locale.LC_CTYPE, _name)
    except locale.Error:
        continue
    if locale.getpreferredencoding(False).lower().replace("-", "") == "utf8":
        break

from pathlib import Path  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402

from vllm_triton_observable.backend import io_spec  # noqa: E402


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        return io_spec.complete_config(auto_complete_model_config)

    def initialize(self, args):
        from vllm_triton_observable.backend.model_instance import ModelInstance
        from vllm_triton_observable.common.errors import ConfigError

        try:
            self._instance = ModelInstance.load(args, Path(pb_utils.get_model_dir()), pb_utils)
        except Exception as exc:  # what had started is stopped by now (ModelInstance's teardown)
            reason = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
            pb_utils.Logger.log_error(f"[vllm] model load failed: {reason}")
            raise pb_utils.TritonModelException(reason) from None

    def execute(self, requests):
        # The instance answers every request through its response sender and never raises: an exception here
        # would make Triton answer and free the requests while the backend still holds them.
        self._instance.execute(requests)
        return None

    def finalize(self):
        instance = getattr(self, "_instance", None)
        if instance is not None:
            instance.close()
            self._instance = None
