"""ethosweep.runtime.bytecode: the package's modules have a .pyc that Python reads where
PYTHONDONTWRITEBYTECODE is set, and a module edited since is compiled again."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from ethosweep.runtime.bytecode import PACKAGE_DIR


def read_from(module: str, env: dict[str, str]) -> str:
    """Where a new interpreter takes `module`'s code from: 'bytecode' or 'source' (`python -v`)."""
    verbose = subprocess.run([sys.executable, "-v", "-c", f"import {module}"], capture_output=True, text=True, env=env)
    source = Path(env["PYTHONPATH"], module.replace(".", "/") + ".py")
    lines = verbose.stderr.splitlines()
    if any(line.startswith("# ") and line.endswith(f" matches {source}") for line in lines):
        return "bytecode"
    assert f"# code object from {source}" in lines, verbose.stderr[-2000:]
    return "source"


def fresh(source: Path) -> bool:
    """Whether `source` has a .pyc that Python takes for it: its header's source mtime and size."""
    import importlib.util

    cached = Path(importlib.util.cache_from_source(str(source)))
    if not cached.is_file():
        return False
    header, stat = cached.read_bytes()[:16], source.stat()
    return header[8:16] == struct.pack("<II", int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)


def test_the_package_is_compiled_once_and_an_edited_module_again(tmp_path):
    shutil.copytree(PACKAGE_DIR, tmp_path / "ethosweep", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    compile_it = [sys.executable, "-c", "from ethosweep.runtime.bytecode import compile_package; compile_package()"]
    assert read_from("ethosweep.runtime.jobs", env) == "source"  # nothing written by that import either
    assert read_from("ethosweep.runtime.jobs", env) == "source"
    subprocess.run(compile_it, env=env, check=True)
    assert read_from("ethosweep.runtime.jobs", env) == "bytecode"
    assert all(fresh(module) for module in tmp_path.rglob("*.py"))  # every module
    # an edit: Python sees the .pyc is stale and compiles the source; the next run's start compiles it again
    with open(tmp_path / "ethosweep/runtime/jobs.py", "a") as f:
        f.write("\nEDITED = True\n")
    assert read_from("ethosweep.runtime.jobs", env) == "source"
    subprocess.run(compile_it, env=env, check=True)
    assert read_from("ethosweep.runtime.jobs", env) == "bytecode"
    edited = [sys.executable, "-c", "import ethosweep.runtime.jobs as j; print(j.EDITED)"]
    assert subprocess.run(edited, env=env, capture_output=True, text=True).stdout == "True\n"


def test_a_run_leaves_every_module_of_the_package_compiled(tiny_sweep):
    """The workflow compiles the package at its start (workflow/rules/common.smk): every module,
    not only those Python imported (which it writes itself where PYTHONDONTWRITEBYTECODE is unset)."""
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert modules and not [module for module in modules if not fresh(module)]
