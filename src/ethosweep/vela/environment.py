"""Stage 4a, Vela environment: another Vela version than the installed one, in an environment of its own.

The Vela installed beside ExecuTorch (uv.lock pins it) runs in-process, as ExecuTorch runs it.
A config that sweeps other versions (`vela: {versions: [5.1.0, 5.2.0]}`) gets, once per
version, an environment the workflow makes itself with uv from the package registry, in
`results/tools/vela/<version>/`:

- `requirements.txt`: ethos-u-vela==<version> and its dependencies, resolved by uv with
  hashes (the environment's lock: the same packages every time it is made);
- `venv/`: exactly those packages (`uv pip sync`), and nothing else: not the project's;
- `env.json`: the version, its `vela` command, the lock's sha256 and the packages.

Made once: Snakemake keeps it for later runs, and uv's cache makes a new one take seconds.
The cells of that version run its `vela` command as a separate process on the same TOSA
partitions with the same flags (ethosweep.vela.partitions). Torch-free.

When it cannot be made, uv's words say why: a version the registry answers it does not have is
that version's cells' outcome (recorded: every other cell goes on), a registry that cannot be
reached is the machine's (the job fails and the next run retries it; ethosweep.runtime.errors).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import Fault, StageError, fault_in_output
from ethosweep.runtime.io import write_json

log = logging.getLogger(__name__)

DISTRIBUTION = "ethos-u-vela"


def find_uv() -> str:
    """The uv executable: the one running this workflow (`uv run` sets $UV), else uv on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        raise StageError(
            "uv is needed to make environments for other Vela versions and was not found "
            "(neither $UV nor uv on PATH); install it (https://docs.astral.sh/uv/) and run with `uv run snakemake`",
            Fault.MISSING_TOOL,  # the machine's, not the cell's: the run with uv retries it
        )
    return found


def _uv(uv: str, *args: str, what: str, stdin: str | None = None) -> str:
    """Run a uv command; its output goes to the job's log; a failure ends in uv's own words, with
    its cause (uv_fault)."""
    proc = subprocess.run([uv, *args], capture_output=True, text=True, input=stdin)
    print(proc.stdout + proc.stderr, flush=True)
    if proc.returncode != 0:
        said = proc.stderr or proc.stdout
        raise StageError(f"{what}: {_uv_message(said)}", uv_fault(said))
    return proc.stdout


# What uv says (0.9, 0.10) when the registry answers that it has no such release ...
_NOT_IN_REGISTRY = re.compile(r"there is no version of|was not found in the package registry|no versions of")
# ... and when the registry could not be asked at all.
_UNREACHABLE = re.compile(
    r"Failed to fetch|error sending request|Request failed after|dns error|Connection refused|timed out|"
    r"Could not connect|Network is unreachable|failed to lookup address",
    re.I,
)


def uv_fault(said: str) -> Fault:
    """The cause of a uv failure: a version the registry does not have (the cells' own outcome), the
    registry or network unreachable, the machine's disk or memory, else a failure on this input."""
    if _UNREACHABLE.search(said):
        return Fault.NETWORK
    if _NOT_IN_REGISTRY.search(said):
        return Fault.MISSING_VERSION
    return fault_in_output(said) or Fault.TOOL


def _uv_message(text: str) -> str:
    """uv's error in one line, without its box-drawing decorations."""
    lines = [
        re.sub(r"^(error|cause|Caused by):\s*", "", re.sub(r"^[\s×╰─▶│]+", "", line)) for line in text.splitlines()
    ]
    return "; ".join(line for line in lines if line and not line.startswith("hint:"))[:400]


def _resolve_locked(uv: str, requirement: str, lock: Path, python: str) -> None:
    """Resolve the requirement from the registry into a lock with hashes."""
    _uv(
        uv,
        *("pip", "compile", "-", "--output-file", str(lock), "--python", python),
        *("--generate-hashes", "--no-header", "--quiet"),
        what=f"could not resolve {requirement} from the registry",
        stdin=requirement + "\n",
    )


def _install_locked(uv: str, requirement: str, lock: Path, venv: Path, python: str) -> Path:
    """A new environment at `venv` holding exactly the lock; its interpreter."""
    _uv(uv, "venv", str(venv), "--python", python, "--quiet", what=f"could not make an environment for {requirement}")
    venv_python = venv / "bin" / "python"
    # each cell runs `vela` as a new process: without .pyc files (and where PYTHONDONTWRITEBYTECODE
    # is set) each would compile Vela's sources again, ~2 s a cell
    _uv(
        uv,
        *("pip", "sync", str(lock), "--python", str(venv_python), "--compile-bytecode", "--quiet"),
        what=f"could not install {requirement}",
    )
    return venv_python


def create_environment(vela_version: str, venv: str, lock: str, env: str, python: str | None = None) -> dict:
    """Make `venv` an environment with ethos-u-vela==`version`, locked in `lock` (see the module
    docstring).

    `python`: the interpreter the environment is made for (default: this one, so the other Vela
    runs on the same Python as the installed one)."""
    version, env_json = vela_version, env  # the workflow's names (runtime.binding)
    uv = find_uv()
    python = python or sys.executable
    requirement = f"{DISTRIBUTION}=={version}"
    lock, venv = Path(lock), Path(venv)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with running("uv", f"resolving {requirement}"):
        _resolve_locked(uv, requirement, lock, python)
    with running("uv", f"installing {requirement}"):
        venv_python = _install_locked(uv, requirement, lock, venv, python)
    vela = venv / "bin" / "vela"
    reported = subprocess.run([str(vela), "--version"], capture_output=True, text=True).stdout.strip()
    if reported != version:
        raise StageError(f"the environment's vela reports version {reported!r}, not {version}")
    record = {
        "version": version,
        "vela": str(vela),
        "python": _first_line(subprocess.run([str(venv_python), "--version"], capture_output=True, text=True).stdout),
        "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest(),
        "packages": locked_packages(lock.read_text()),
        "uv": _first_line(subprocess.run([uv, "--version"], capture_output=True, text=True).stdout),
    }
    write_json(env_json, record)
    log.info("Vela %s ready in %s (%s)", version, venv, ", ".join(f"{k} {v}" for k, v in record["packages"].items()))
    return record


def locked_packages(requirements: str) -> dict[str, str]:
    """{name: version} of a resolved requirements file."""
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", requirements, re.M))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
