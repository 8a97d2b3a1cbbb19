"""Write generated files, or (check mode) report which checked-in ones differ from the generator's output.

In common because both the package's own generators (docs/metrics.md, docs/configuration.md) and the repository's
(dashboards, alerts, deploy) write files this way."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], check: bool, command: str, root: Path | None = None,
                   stale_dir: Path | None = None) -> int:
    """`files`: path → expected text. `stale_dir`: files there that are not generated any more are stale too."""
    leftovers = [p for p in stale_dir.glob("*.json") if p not in files] if stale_dir and stale_dir.exists() else []
    if check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text] + leftovers
        if stale:
            names = ", ".join(os.path.relpath(p, root or Path.cwd()) for p in stale)
            print(f"out of date: {names}; run `{command}`", file=sys.stderr)
            return 1
        return 0
    for path in leftovers:
        path.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} files ({command})")
    return 0
