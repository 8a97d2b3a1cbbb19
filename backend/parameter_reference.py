"""docs/configuration.md's table of config.pbtxt keys, generated from the parameter tables (backend.plan).

The page is written by hand around the table; the table sits between two marker lines and is replaced whole.

    make docs    (python -m vllm_triton_observable.backend.parameter_reference docs/configuration.md [--check])
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..common.generated_files import write_or_check
from .plan import PARAMETER_TABLES
from .settings import PYTHON_BACKEND_KEYS

BEGIN = "<!-- parameters: generated from the parameter tables by `make docs`; edit backend/settings.py, " \
        "health/settings.py -->"
END = "<!-- end of parameters -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table() -> str:
    lines = ["| parameter | type | default | meaning |", "|---|---|---|---|"]
    for parameters in PARAMETER_TABLES:
        for row in parameters.reference_rows():
            lines.append(f"| `{row.key}` | {row.type} | {row.default} | {_cell(row.meaning)} |")
    keys = ", ".join(f"`{key}`" for key in sorted(PYTHON_BACKEND_KEYS))
    lines += ["", f"Triton's Python backend reads {keys} from the same block; they are accepted too."]
    return "\n".join(lines)


def render(page: str) -> str:
    """`page` with its generated block replaced; an error when the markers are missing."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"the page lacks the marker lines {BEGIN!r} and {END!r}")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    target = Path(argv[0])
    return write_or_check({target: render(target.read_text())}, "--check" in argv, "make docs")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
