"""The compatibility layer's pure parts: the tested window and what each running vLLM offers."""

import pytest

from vllm_triton_observable.common import vllm_compat


@pytest.mark.parametrize("version", ["0.26.0", "0.27.1", "0.32.0+cpu", "0.33.0", "0.30.1.dev4+g1234"])
def test_releases_inside_the_window_are_logged_as_tested(version):
    inside, note = vllm_compat.window_note(version)
    assert inside and note.startswith(f"vLLM {version} ") and "0.26.0 to 0.33.0" in note


@pytest.mark.parametrize("version", ["0.25.1", "0.33.1", "0.34.0", "1.0.0", "dev"])
def test_releases_outside_the_window_get_a_warning_that_says_so(version):
    inside, note = vllm_compat.window_note(version)
    assert not inside and "outside the range this backend is tested with (0.26.0 to 0.33.0)" in note


def test_the_running_vllm_is_inside_the_window():
    assert vllm_compat.window_note(vllm_compat.vllm_version())[0]


def test_every_request_error_class_named_for_a_release_exists_from_it():
    """A class the running vLLM has is found; one it lacks is left out, not an ImportError."""
    from vllm import exceptions

    errors = vllm_compat.request_errors()
    for name in ("QueueOverflowError", "MaxQueuedTokensError", "RetryableRequestError"):
        assert (getattr(exceptions, name, None) in errors.retryable) == hasattr(exceptions, name)
    assert errors.client and all(issubclass(cls, Exception) for cls in errors.client)


def test_families_since_a_release_are_looked_up_by_vllm_or_exposed_name():
    assert vllm_compat.family_since("vllm:admission_rejections_total") == "0.32"
    assert vllm_compat.family_since("vllm:request_num_preemptions") == "0.30"
    assert vllm_compat.family_since("vllm:num_preemptions_total") is None


def test_the_shutdown_grace_is_given_where_the_release_takes_it():
    class Takes:
        def shutdown(self, timeout=None): ...

    class Lacks:
        def shutdown(self): ...

    assert vllm_compat.shutdown_grace(Takes(), 15.0) == {"timeout": 15.0}
    assert vllm_compat.shutdown_grace(Lacks(), 15.0) == {}
