"""Which tool versions produced an artifact (read from package metadata: no imports)."""

from __future__ import annotations

import platform
from functools import lru_cache
from importlib import metadata

# Column name in results -> distribution name on PyPI.
TOOLS = {
    "torch": "torch",
    "executorch": "executorch",
    "vela": "ethos-u-vela",
    "tosa_tools": "tosa-tools",
}


@lru_cache(maxsize=None)
def tool_versions() -> dict[str, str]:
    versions = {}
    for column, dist in TOOLS.items():
        try:
            versions[column] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[column] = "not installed"
    versions["ethosweep"] = metadata.version("ethosweep")
    versions["python"] = platform.python_version()
    return versions
