"""Write generated files, or (check mode) report which checked-in ones differ from the generator's output."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(files: dict[Path, str], root: Path, check: bool, command: str,
                   stale_dir: Path | None = None) -> int:
    """`files`: path → expected text. `stale_dir`: files there that are not generated any more are stale too."""
    leftovers = [p for p in stale_dir.glob("*.json") if p not in files] if stale_dir and stale_dir.exists() else []
    if check:
        stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text] + leftovers
        if stale:
            names = ", ".join(str(p.relative_to(root)) for p in stale)
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
