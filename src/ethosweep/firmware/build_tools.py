"""The build tools the firmware stages run: CMake and Ninja locked in ethosweep's environment (uv.lock),
else the user's on PATH (an environment made otherwise, e.g. with conda)."""

from __future__ import annotations

import os
import shutil
import sys
from importlib import metadata
from pathlib import Path


def environment_bins() -> list[str]:
    """Where the locked build tools (cmake, ninja) are: the bin folder of the environment that installed
    each (`uv run --with ...` runs in an overlay whose own bin folder changes from run to run: a path
    found there would rerun what records it), else the interpreter's."""
    bins = []
    for dist in ("cmake", "ninja"):
        try:
            site = Path(str(metadata.distribution(dist).locate_file("")))
        except metadata.PackageNotFoundError:
            continue
        bins.append(site.parents[2] / "bin")  # <env>/lib/pythonX.Y/site-packages
    bins.append(Path(sys.executable).parent)
    return [str(b) for b in dict.fromkeys(bins) if b.is_dir()]


def build_tool(program: str) -> str:
    """The locked CMake or Ninja (sdk.py finds it the same way), else the one on PATH."""
    return shutil.which(program, path=os.pathsep.join(environment_bins())) or program
