"""The ensemble walkthrough's client: `raw_text` in, `final_output` out (samples/ensemble_repository).

    python samples/clients/ensemble_client.py --url localhost:8000 "What is Triton?"            # HTTP infer()
    python samples/clients/ensemble_client.py --url localhost:8001 --stream "What is Triton?"   # gRPC streaming

The input array is built with `dtype=object`: tritonclient refuses a numpy unicode array (`np.array(["..."])`, as
some walkthroughs write it) for a BYTES input.
"""

from __future__ import annotations

import argparse
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def infer(url: str, model: str, text: str) -> None:
    client = httpclient.InferenceServerClient(url)
    raw_text = httpclient.InferInput("raw_text", [1], "BYTES")
    raw_text.set_data_from_numpy(np.array([text], dtype=object))
    result = client.infer(model, [raw_text], outputs=[httpclient.InferRequestedOutput("final_output")])
    print(result.as_numpy("final_output")[0].decode())


def stream(url: str, model: str, text: str) -> None:
    client = grpcclient.InferenceServerClient(url)
    raw_text = grpcclient.InferInput("raw_text", [1], "BYTES")
    raw_text.set_data_from_numpy(np.array([text], dtype=object))
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer(model, [raw_text], enable_empty_final_response=True)
    while True:
        result, error = responses.get(timeout=120)
        if error is not None:
            sys.exit(f"error: {error}")
        piece = result.as_numpy("final_output")
        if piece is not None:  # the final flag comes on an empty response of its own
            print(piece[0].decode(), end="", flush=True)
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    print()
    client.stop_stream()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text")
    parser.add_argument("--url", help="host:port; default localhost:8000 (HTTP), localhost:8001 with --stream")
    parser.add_argument("--stream", action="store_true", help="stream from vllm_ensemble_stream over gRPC")
    parser.add_argument("--model", help="default vllm_ensemble, vllm_ensemble_stream with --stream")
    args = parser.parse_args()
    if args.stream:
        stream(args.url or "localhost:8001", args.model or "vllm_ensemble_stream", args.text)
    else:
        infer(args.url or "localhost:8000", args.model or "vllm_ensemble", args.text)


if __name__ == "__main__":
    main()
