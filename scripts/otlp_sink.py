"""An OTLP/HTTP traces endpoint that accepts and discards: where `make bench`'s traced configuration sends its spans.

A real collector runs on another machine and costs the server nothing but the export itself; this one answers
at once (protobuf and JSON alike), in a process of its own, so the benchmark measures what tracing costs the
server: spans built, batched, serialized and posted. `GET /` answers how many exports arrived, by content type
(Triton posts JSON, the OpenTelemetry SDK of this backend and vLLM protobuf): proof that the traced configuration
was traced. Usage: python scripts/otlp_sink.py PORT
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXPORTS: Counter[str] = Counter()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector does

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        EXPORTS[self.headers.get("Content-Type", "")] += 1
        answer = b"{}" if "json" in self.headers.get("Content-Type", "") else b""  # an empty export response
        self.send_response(200)
        self.send_header("Content-Type", self.headers.get("Content-Type", "application/x-protobuf"))
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:  # noqa: N802
        answer = json.dumps(dict(EXPORTS)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
