"""Which tool versions produced an artifact (read from package metadata: no imports)."""

from __future__ import annotations

import platform
from functools import lru_cache

from ethosweep.runtime.inherited import export, inherited

# Column name in results -> distribution name on PyPI.
TOOLS = {
    "torch": "torch",
    "executorch": "executorch",
    "vela": "ethos-u-vela",
    "tosa_tools": "tosa-tools",
}


@lru_cache(maxsize=None)
def tool_versions() -> dict[str, str]:
    """The versions of the tools and of ethosweep (as the Snakemake process found them, when it
    runs the same interpreter: see ethosweep.runtime.inherited)."""
    return inherited("TOOL_VERSIONS", _look_up_versions)


def export_tool_versions() -> None:
    """Look the versions up once, here, for every job this process starts."""
    export("TOOL_VERSIONS", _look_up_versions())


def _look_up_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for column, dist in TOOLS.items():
        try:
            versions[column] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[column] = "not installed"
    versions["ethosweep"] = metadata.version("ethosweep")
    versions["python"] = platform.python_version()
    return versions
