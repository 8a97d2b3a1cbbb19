"""Plain `infer()` over HTTP, as Triton's own walkthroughs call a model.

Needs a model that is not decoupled (`model_transaction_policy { decoupled: false }` in its config.pbtxt): Triton
answers `infer()` on a decoupled model with "HTTP end point doesn't support models with decoupled transaction
policy".

    python samples/clients/http_infer.py --url localhost:8000 --model vllm_infer "What is Triton?"
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import tritonclient.http as httpclient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--url", default="localhost:8000")
    parser.add_argument("--model", default="vllm_infer")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    # BYTES tensors from object arrays: tritonclient refuses a numpy unicode array (np.array(["..."])) as BYTES.
    prompt = np.array([args.prompt.encode()], dtype=object)
    sampling = np.array([json.dumps({"max_tokens": args.max_tokens, "temperature": 0}).encode()], dtype=object)
    inputs = [httpclient.InferInput("text_input", [1], "BYTES"), httpclient.InferInput("sampling_parameters", [1],
                                                                                      "BYTES")]
    inputs[0].set_data_from_numpy(prompt)
    inputs[1].set_data_from_numpy(sampling)
    client = httpclient.InferenceServerClient(args.url)
    result = client.infer(args.model, inputs, outputs=[httpclient.InferRequestedOutput("text_output")])
    print(result.as_numpy("text_output")[0].decode())


if __name__ == "__main__":
    main()
