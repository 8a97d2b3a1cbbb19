"""UnloadWatch: drains once the model turns from ready to not ready, closes within the exit timeout once the
server's HTTP endpoint is gone, and does neither before the model was ready."""

import time

from vllm_triton_observable.backend.unload_watch import Readiness, UnloadWatch

READY, NOT_READY, EXITING, UNKNOWN = (Readiness.READY, Readiness.NOT_READY, Readiness.SERVER_EXITING,
                                      Readiness.UNKNOWN)


class Log:
    def __init__(self):
        self.lines = []

    def info(self, message):
        self.lines.append(message)

    warn = info


def watch(readiness, exit_budget_s=20.0):
    answers, drained, closed, log = iter(readiness), [], [], Log()

    def is_ready():
        value = next(answers, NOT_READY)
        if isinstance(value, Exception):
            raise value
        return value

    w = UnloadWatch("m", is_ready, lambda timeout: drained.append(timeout) or 2, closed.append, 7.0, exit_budget_s,
                    log, interval_s=0.01)
    w.start()
    return w, drained, closed, log


def test_drains_once_when_the_model_stops_being_ready():
    w, drained, closed, log = watch([READY, READY, RuntimeError("no answer"), UNKNOWN, READY, NOT_READY, NOT_READY])
    time.sleep(0.3)
    w.stop()
    assert drained == [7.0] and closed == []
    assert log.lines[0] == "unload watch: following Triton's readiness of m"
    assert "Triton no longer reports m ready" in log.lines[1] and "up to 7 s" in log.lines[1]


def test_a_server_that_closed_its_endpoint_is_exiting_the_engine_shuts_down_within_its_exit_timeout():
    w, drained, closed, log = watch([READY, UNKNOWN, EXITING, NOT_READY], exit_budget_s=3.0)
    time.sleep(0.3)
    w.stop()
    assert closed == [3.0] and drained == []  # the drain bound is cut to what the exit timeout leaves
    assert "tritonserver is exiting" in log.lines[1] and "up to 3 s" in log.lines[1]
    w, _, closed, _ = watch([READY, EXITING], exit_budget_s=60.0)
    time.sleep(0.2)
    w.stop()
    assert closed == [7.0]  # UNLOAD_DRAIN_TIMEOUT_S when the exit timeout allows it


def test_not_ready_or_refused_before_ready_is_a_model_still_loading():
    w, drained, closed, _ = watch([NOT_READY] * 5 + [EXITING] * 5 + [READY] * 1000)
    time.sleep(0.2)
    w.stop()
    assert drained == [] and closed == []


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
    assert http_readiness(base, "m", "1")() is READY
    assert http_readiness(base, "gone", "1")() is NOT_READY
    assert http_readiness(base, "restricted", "1")() is UNKNOWN  # cannot tell: not an unload
    server.shutdown()  # still listening, nobody answers: a server too busy to answer is not exiting
    assert http_readiness(base, "m", "1")() is UNKNOWN
    server.server_close()  # nothing listens any more: what tritonserver's HTTP endpoint does once it is signalled
    assert http_readiness(base, "m", "1")() is EXITING


def test_the_servers_http_url_comes_from_its_command_line():
    from vllm_triton_observable.common.server_flags import http_url

    assert http_url(["tritonserver"]) == "http://127.0.0.1:8000"
    assert http_url(["tritonserver", "--http-port=9", "--http-address", "127.0.0.2"]) == "http://127.0.0.2:9"
    assert http_url(["tritonserver", "--allow-http=false"]) is None


def test_the_servers_exit_timeout_comes_from_its_command_line():
    from vllm_triton_observable.common.server_flags import exit_timeout_s

    assert exit_timeout_s(["tritonserver"]) == 30.0
    assert exit_timeout_s(["tritonserver", "--exit-timeout-secs", "90"]) == 90.0
    assert exit_timeout_s(["tritonserver", "--exit-timeout-secs=x"]) == 30.0
