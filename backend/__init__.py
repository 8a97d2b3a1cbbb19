"""The Triton Python-based `vllm` backend: request decoding, the engine runner, response streaming.

`model.py` (installed as `<backends>/vllm/model.py`) is a thin adapter over `model_instance`, the composition root.
Nothing in this package imports vLLM at module level unless it needs it: Triton's auto-complete step loads
`model.py` in its own short-lived stub, and importing vLLM there would cost ~15 s.
"""
