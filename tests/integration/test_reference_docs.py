"""Generated reference documents never drift from their generators."""

from helpers import ROOT


def test_metric_reference_is_up_to_date():
    from vllm_triton_observable.metrics.catalogue import main

    assert main([str(ROOT / "docs" / "metrics.md"), "--check"]) == 0, "run `make docs`"


def test_configuration_reference_is_up_to_date():
    from vllm_triton_observable.backend.parameter_reference import main

    assert main([str(ROOT / "docs" / "configuration.md"), "--check"]) == 0, "run `make docs`"
