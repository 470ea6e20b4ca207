"""Which tool versions produced an artifact (read from package metadata: no imports)."""

from __future__ import annotations

import platform
from functools import lru_cache

from ethosweep.runtime.inherited import export, inherited

# Key in the stages' JSON records -> distribution name on PyPI.
TOOLS = {
    "torch": "torch",
    "executorch": "executorch",
    "vela": "ethos-u-vela",
    "tosa_tools": "tosa-tools",
}


def version_columns(versions: dict) -> dict[str, str]:
    """A versions record as the summaries' columns: torch_version, ..., ethosweep_version."""
    return {f"{key}_version": versions.get(key, "") for key in [*TOOLS, "ethosweep"]}


VERSION_COLUMNS = tuple(version_columns({}))


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
