"""A new engine's first request, sent by the backend before the engine serves anyone.

vLLM builds the kernel that ranks sampled tokens for logprobs (`batched_count_greater_than`, a `torch.compile`d
function; on CPU inductor runs a C++ compiler) the first time a request asks for logprobs, and until it is built
every request of that engine waits: 7 s on an idle two-core machine with an empty compile cache, over 30 s while
other engines start beside it — long enough for the health monitor's stall watchdog to restart the engine, which
throws the half-built kernel away. One request with logprobs when the engine starts (at load and after every
restart) pays for it while the model is not yet ready; with the compile cache warm it takes about a second.
"""

from __future__ import annotations

import uuid
from typing import Any

# One token id, not text: valid for every vocabulary, needing no tokenizer (skip_tokenizer_init works too) and
# fitting any max_model_len that can generate at all. Prompt logprobs use the same kernel: no need to ask for them.
WARM_UP_PROMPT = (0,)
REQUEST_ID_PREFIX = "warm-up-"


def needs_warm_up(engine: Any, supported_tasks: tuple[str, ...]) -> bool:
    """A generating engine that may be asked for logprobs; a pooling model or `max_logprobs: 0` never builds it."""
    max_logprobs = getattr(getattr(engine, "model_config", None), "max_logprobs", 20)
    return "generate" in supported_tasks and max_logprobs != 0


def warm_up_request() -> tuple[Any, Any, str]:
    """(prompt, sampling parameters, request id): one token, with its logprobs."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, logprobs=1, detokenize=False)
    return TokensPrompt(prompt_token_ids=list(WARM_UP_PROMPT)), params, f"{REQUEST_ID_PREFIX}{uuid.uuid4().hex}"
