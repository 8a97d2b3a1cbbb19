"""UnloadWatch: drains once the model turns from ready to not ready, never before it was ready."""

import time

from backend.unload_watch import UnloadWatch


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

    w = UnloadWatch(is_ready, lambda timeout: drained.append(timeout) or 2, 7.0, log, interval_s=0.01)
    w.start()
    return w, drained, log


def test_drains_once_when_the_model_stops_being_ready():
    w, drained, log = watch([True, True, RuntimeError("no answer"), True, False, False])
    time.sleep(0.3)
    w.stop()
    assert drained == [7.0]
    assert any("2 request(s) did not finish within 7 s" in line for line in log.lines)


def test_not_ready_before_ready_is_a_model_still_loading():
    w, drained, _ = watch([False] * 5 + [True] * 1000)
    time.sleep(0.2)
    w.stop()
    assert drained == []
