"""Generated reference documents never drift from their generators."""

import sys

from helpers import ROOT


def test_metric_reference_is_up_to_date():
    from metrics.catalogue import main

    assert main([str(ROOT / "docs" / "metrics.md"), "--check"]) == 0, (
        f"run `{sys.executable} -m metrics.catalogue docs/metrics.md`")
