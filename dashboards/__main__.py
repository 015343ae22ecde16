"""Write the generated dashboards under docker/grafana/dashboards/, or check them (--check).

Usage: ``python -m dashboards [--check] [--out DIR]``. Exit codes: 0 written or up to date;
1 a committed file differs from the generated one (run without --check to regenerate).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dashboards import DASHBOARDS
from dashboards.render import render

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docker" / "grafana" / "dashboards"


def main(argv: list[str] | None = None) -> int:
    """Generate every dashboard; with --check, only compare."""
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the dashboard files")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = args.out / name
        text = render(build())
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} differs from the generated dashboard; run `python -m dashboards`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
