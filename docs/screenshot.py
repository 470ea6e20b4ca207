"""The README's picture of the report: its first screen, rendered by headless Chromium.

    uv run snakemake --cores 8                      # the default matrix (any finished run will do)
    uv run python docs/screenshot.py                # -> docs/images/report.png

Renders results/report/index.html (a self-contained page, no server) at a laptop's window size
and keeps the first screen: what a user sees when they open the report. The tests run it on the
tiny test sweep's report, to a temporary file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# A laptop's browser window: the report's first screen as a user opens it.
WINDOW = (1280, 900)
# Headless Chromium on a machine without a display or a network (the flags keep it from trying
# to reach Google's services; --no-sandbox because CI runs as root).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium() -> str | None:
    return next(
        (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
    )


def screenshot(page: Path, png: Path, window: tuple[int, int] = WINDOW) -> Path:
    """`page` rendered to `png` (its first `window` of pixels)."""
    browser = chromium()
    if browser is None:
        raise SystemExit("needs Chromium on PATH (Debian: apt-get install chromium)")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ethosweep-chromium-") as profile:
        proc = subprocess.run(
            [
                browser,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={window[0]},{window[1]}",
                f"--screenshot={png.resolve()}",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if proc.returncode != 0 or not png.exists():
        raise SystemExit(f"Chromium could not render {page}:\n{proc.stderr[-2000:]}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", nargs="?", type=Path, default=Path("results/report/index.html"))
    parser.add_argument("png", nargs="?", type=Path, default=Path(__file__).parent / "images" / "report.png")
    args = parser.parse_args(argv)
    if not args.page.exists():
        raise SystemExit(f"{args.page} does not exist: run the workflow first (uv run snakemake --cores 8)")
    print(screenshot(args.page, args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
