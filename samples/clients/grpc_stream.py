"""Token streaming over gRPC (`stream_infer`), the way the official backend's clients stream.

    python samples/clients/grpc_stream.py --url localhost:8001 --model vllm_model "What is Triton?"
    python samples/clients/grpc_stream.py --lora tiny-lora --model vllm_lora "What is Triton?"   # a LoRA adapter
"""

from __future__ import annotations

import argparse
import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def tensor(name: str, array: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(array.shape), dtype)
    t.set_data_from_numpy(array)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--url", default="localhost:8001")
    parser.add_argument("--model", default="vllm_model")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--lora", help="a name from the model's multi_lora.json")
    args = parser.parse_args()

    sampling = {"max_tokens": args.max_tokens, "temperature": 0, **({"lora_name": args.lora} if args.lora else {})}
    inputs = [tensor("text_input", np.array([args.prompt.encode()], dtype=object), "BYTES"),
              tensor("stream", np.array([True]), "BOOL"),
              tensor("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=object), "BYTES")]
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer(args.model, inputs, enable_empty_final_response=True)
    while True:
        result, error = responses.get(timeout=120)
        if error is not None:
            sys.exit(f"error: {error}")
        text = result.as_numpy("text_output")
        if text is not None:  # the final flag may come with the last text or on an empty response of its own
            print(text[0].decode(), end="", flush=True)
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    print()
    client.stop_stream()


if __name__ == "__main__":
    main()
