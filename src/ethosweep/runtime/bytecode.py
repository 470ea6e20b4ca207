"""The package's own bytecode, where Python would not write it.

uv compiles the installed libraries when it installs them (pyproject.toml's `compile-bytecode`), but
not this package: an editable install leaves its sources in src/. Where PYTHONDONTWRITEBYTECODE is
set (as on these machines), each job's process and each fork of a warm worker then compiled every
ethosweep module it imported from source, every time. A run compiles them once, at its start; Python
reads a fresh .pyc whatever that variable says, and compiles a module edited since from its source
until the next run's start writes its .pyc.
"""

from __future__ import annotations

import compileall
from pathlib import Path

from ethosweep.runtime.codeversion import PACKAGE_DIR


def compile_package(folder: Path = PACKAGE_DIR) -> None:
    """Write the .pyc of each module under `folder` that has none fresh (when none is stale, a stat
    and a read of its .pyc's header per module: ~2 ms). A folder that cannot be written is left as
    it is."""
    compileall.compile_dir(folder, quiet=2)
