"""UnloadWatch: drains once the model turns from ready to not ready, never before it was ready."""

import time

from vllm_triton_observable.backend.unload_watch import UnloadWatch


class Log:
    def __init__(self):
        self.lines = []

    def info(self, message):
        self.lines.append(message)

    warn = info


def watch(readiness):
    answers, drained, log = iter(readiness), [], Log()

    def is_ready():
        value = next(answers, False)
        if isinstance(value, Exception):
            raise value
        return value

    w = UnloadWatch("m", is_ready, lambda timeout: drained.append(timeout) or 2, 7.0, log, interval_s=0.01)
    w.start()
    return w, drained, log


def test_drains_once_when_the_model_stops_being_ready():
    w, drained, log = watch([True, True, RuntimeError("no answer"), True, False, False])
    time.sleep(0.3)
    w.stop()
    assert drained == [7.0]
    assert log.lines[0] == "unload watch: following Triton's readiness of m"
    assert "Triton no longer reports m ready" in log.lines[1] and "up to 7 s" in log.lines[1]


def test_not_ready_before_ready_is_a_model_still_loading():
    w, drained, _ = watch([False] * 5 + [True] * 1000)
    time.sleep(0.2)
    w.stop()
    assert drained == []


def test_http_readiness_reads_tritons_answers():
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from vllm_triton_observable.backend.unload_watch import http_readiness

    status = {"/v2/models/m/versions/1/ready": 200, "/v2/models/gone/versions/1/ready": 400}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's spelling
            self.send_response(status.get(self.path, 403))
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    assert http_readiness(base, "m", "1")() is True
    assert http_readiness(base, "gone", "1")() is False
    assert http_readiness(base, "restricted", "1")() is None  # cannot tell: not an unload
    server.shutdown()
    assert http_readiness(base, "m", "1")() is None


def test_the_servers_http_url_comes_from_its_command_line():
    from vllm_triton_observable.common.server_flags import http_url

    assert http_url(["tritonserver"]) == "http://127.0.0.1:8000"
    assert http_url(["tritonserver", "--http-port=9", "--http-address", "127.0.0.2"]) == "http://127.0.0.2:9"
    assert http_url(["tritonserver", "--allow-http=false"]) is None
