"""Vela on a program's partitions: one run per partition, in a fork, and what a failure says.

Each partition's TOSA is compiled with ExecuTorch's own Vela entry point
(`executorch.backends.arm.arm_vela.vela_compile`, what EthosUBackend.preprocess calls) and the
cell's flags, in a forked child (ethosweep.runtime.isolation): a crash of Vela's native compiler
ends in the signal's name, tried once more in a fresh fork before it is taken for the input's.
A cell of another Vela version runs that version's `vela` command instead, inside the same
`vela_compile` (CommandLineVela), so its output is packed by ExecuTorch's own code.

When Vela fails on a partition, the failure says what happened and keeps what reproduces it:
- the partition's TOSA, the vela.ini and the exact command line in `repro/` (write_reproducer);
- where Vela refuses an operator (or crashes on one, reproducibly), the operators it refuses,
  located by compiling parts of the partition (ethosweep.vela.refusals) and named in the model's
  terms. The search never replaces the failure it searches: if it fails itself, or if no part
  compiles without crashing (nothing narrowed), the cell keeps Vela's own failure, its signal and
  its reproducer, and one line says why the search stopped;
- a failure of the machine (memory, a full disk) is raised as such, without a search: the job
  fails and the next run retries it (ethosweep.runtime.errors).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ethosweep.matrix import targets as tg
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import Fault, StageError, fault_of, fault_of_process, of_the_machine
from ethosweep.runtime.isolation import ToolCrashed, ToolFailed, call_in_child, signal_name
from ethosweep.runtime.provenance import tool_versions

# Added to the cell's flags for this run only: the per-layer CSV. It changes no byte of
# Vela's output (checked in tests/test_compile_once.py), and the .pte records the flags
# without it, as aot_arm_compiler's does.
REPORT_FLAGS = ("--verbose-performance",)
# Vela's words for an operator it cannot place (as opposed to a configuration it rejects, which no
# operator of the partition causes): only then are the refused operators looked for.
OPERATOR_REFUSAL = re.compile(r"operation|operator|could not run on NPU|not supported|unsupported", re.I)
# ... but not one about the file: a Vela too old for the TOSA version cannot read any part of it
# (Vela 4.1.0 on ExecuTorch 1.5.1's TOSA 1.0: "Unsupported TOSA version: 1.0.0"), nothing to locate
NOT_AN_OPERATOR = re.compile(r"TOSA version", re.I)
# Vela's words when a partition's tensors outgrow the SRAM the memory mode gives it (the arena: 256 KB
# in Dedicated_Sram_256KB): no operator is refused, the model does not fit this configuration
DOES_NOT_FIT = re.compile(r"Failed to allocate tensors\. Memory used (\d+), limit (\d+)")


# ---- Vela's reports -----------------------------------------------------------------


def read_summary(path: Path) -> dict:
    with open(path, newline="") as f:
        row = next(csv.DictReader(f))
    return {key: _parse(value) for key, value in row.items()}


def read_per_layer(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{key.strip(): _parse(value) for key, value in row.items()} for row in csv.DictReader(f)]


def _parse(text):
    try:
        number = float(text)
    except (TypeError, ValueError):
        return text
    return int(number) if number.is_integer() and "." not in str(text) else number


# ---- compiling a partition ----------------------------------------------------------------


def _vela_in_child(tosa: bytes, flags: list[str], workdir: str, vela_command: str | None = None) -> bytes:
    """Runs in the forked child: ExecuTorch's vela_compile, reports left in `workdir`/output.
    With `vela_command`, that executable (another Vela version) compiles instead of the
    installed Vela; the fork keeps the replacement out of the job's own process."""
    from executorch.backends.arm import arm_vela

    if vela_command is not None:
        arm_vela.vela = CommandLineVela(vela_command)  # the module vela_compile calls `main` on
    result = arm_vela.vela_compile(tosa, [*flags, *REPORT_FLAGS], intermediate_path=workdir)
    if result.external_blocks:  # only with compile-spec block placements, which ethosweep never sets
        raise StageError("Vela returned external blocks; ethosweep keeps every payload inline")
    return result.processed_bytes


class CommandLineVela:
    """Stands in for the `ethosu.vela.vela` module inside vela_compile: `main(argv)` runs another
    Vela version's command with the same arguments, its output going to the job's log."""

    def __init__(self, command: str):
        self.command = command

    def main(self, argv: list[str]) -> int:
        proc = subprocess.run([self.command, *argv], capture_output=True, text=True)
        output = proc.stdout + proc.stderr
        print(output, flush=True)
        if proc.returncode < 0:  # SIGKILL: memory; any other signal: a crash, tried once more
            name = signal_name(-proc.returncode)
            said = "was killed (SIGKILL), most likely for memory" if name == "SIGKILL" else f"crashed ({name})"
            raise ToolCrashed(said, name)
        if proc.returncode != 0:
            # its own words; a MemoryError or a full disk in its output is the machine's
            raise StageError(vela_error_message(output), fault_of_process(proc.returncode, output))
        return 0


def vela_error_message(output: str) -> str:
    """Vela's own words for a failure, from what its command printed: the lines that say what
    went wrong (Vela prints e.g. "Unsupported TOSA version: 1.0.0" before its traceback, argparse
    "vela: error: ..."), with the exception that ended it, if any."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    exception = ""
    if "Traceback (most recent call last):" in lines:
        start = lines.index("Traceback (most recent call last):")
        exception = next((line for line in reversed(lines) if not line.startswith(" ")), "")
        lines = lines[:start]
    said = [line.strip() for line in lines if re.search(r"error|unsupported|not supported|invalid", line, re.I)]
    message = "; ".join(dict.fromkeys(said[-3:])) or (lines[-1].strip() if lines else "")
    if exception and exception not in message:
        message = f"{message} ({exception})" if message else exception
    return message or "exited with an error and printed nothing"


def compile_partition(
    tosa: bytes, flags: list[str], workdir: Path, what: str, vela_command: str | None = None, retry_crash: bool = True
) -> tuple[bytes, dict, list[dict]]:
    """Vela on one partition's TOSA: (payload, summary row, per-layer rows)."""
    workdir.mkdir(parents=True, exist_ok=True)
    payload = call_in_child(_vela_in_child, tosa, flags, str(workdir), vela_command, what=what, retry_crash=retry_crash)
    (summary_file,) = sorted((workdir / "output").glob("out_summary_*.csv"))
    return payload, read_summary(summary_file), read_per_layer(workdir / "output" / "out_per-layer.csv")


# ---- a cell's failure -----------------------------------------------------------------------


class VelaFailure(StageError):
    """A cell's Vela run failed: `reason` (without the reproducer), `reproducer`, `details` (what was
    located: `refused`; why the search stopped; the fallback's attempts), `kept_nodes` (the model's
    nodes of what Vela refused, to keep on the CPU), and its cause (`fault`, `reproduced`)."""

    def __init__(
        self,
        message: str,
        fault: Fault = Fault.TOOL,
        reproducer: str = "",
        details: dict | None = None,
        reproduced: bool = False,
    ):
        super().__init__(message, fault)
        self.reason = message.split(" (reproducer: ")[0]
        self.reproducer = reproducer
        self.details = details or {}
        self.reproduced = reproduced

    @property
    def kept_nodes(self) -> list[str]:
        return list(dict.fromkeys(n for part in self.details.get("refused", []) for n in part.get("nodes", [])))

    def fallbacks(self) -> list[list[str]]:
        """What to keep on the CPU, in the order to try: the elementwise operators that join the
        refused parts' accumulators (a residual add: the layers around it stay on the NPU), then
        every node of the refused parts. At most two lowerings."""
        parts = self.details.get("refused", [])
        joins = list(dict.fromkeys(n for part in parts for n in part.get("joins", [])))
        return [nodes for nodes in (joins, self.kept_nodes) if nodes][:2] if joins != self.kept_nodes else [joins]


@dataclass
class VelaRun:
    """Vela with one cell's flags, over a program's partitions."""

    flags: list[str]
    where: str
    vela_command: str | None
    vela_version: str | None
    repro: Path
    vela: dict
    searches: Path | None = None  # where the refusal search's seeds are kept when no store is set

    @property
    def tool(self) -> str:
        return "Vela" if self.vela_version is None else f"Vela {self.vela_version}"

    def compile_all(
        self, tosas: list[bytes], sources: list | None = None, explain: bool = True
    ) -> tuple[list, list, list]:
        """(payloads, summary rows, per-layer rows) of every partition; VelaFailure on the first
        partition Vela fails on, with (`explain`) what it refuses located and named (`sources`) and
        a reproducer. A failure of the machine is raised as it is."""
        payloads, rows, layers, compiled = [], [], [], {}
        with tempfile.TemporaryDirectory(prefix="ethosweep-vela-") as tmp:
            for index, tosa in enumerate(tosas):
                key = hashlib.sha256(tosa).hexdigest()
                if key not in compiled:  # a partition identical to an earlier one compiles identically
                    try:
                        with running(self.tool, f"compiling partition {index} for {self.where}"):
                            compiled[key] = self.compile(tosa, Path(tmp) / f"partition_{index}", index)
                    except (ToolCrashed, ToolFailed) as error:
                        if of_the_machine(error):
                            raise  # memory, disk: the machine's, retried (nothing to locate or reproduce)
                        if not explain:
                            raise VelaFailure(
                                f"{self.tool} failed on partition {index}: {error}",
                                fault_of(error),
                                reproduced=getattr(error, "reproduced", False),
                            ) from error
                        search = self.locate(error, tosa, index, sources, Path(tmp))
                        raise vela_failure(error, index, tosa, self, search) from error
                payload, row, layer_rows = compiled[key]
                payloads.append(payload)
                rows.append({**row, "partition": index})
                layers.extend({"partition": index, **layer} for layer in layer_rows)
        return payloads, rows, layers

    def compile(self, tosa: bytes, workdir: Path, index: int | None = None, retry_crash: bool = True):
        what = "Vela on a part" if index is None else f"Vela on partition {index}"
        return compile_partition(
            tosa, self.flags, workdir, what=what, vela_command=self.vela_command, retry_crash=retry_crash
        )

    def locate(self, error: StageError, tosa: bytes, index: int, sources: list | None, workdir: Path) -> "Search":
        """The operators of the partition Vela refuses (ethosweep.vela.refusals), by the same Vela with
        the same flags on parts of it. Looked for when Vela names an operator it cannot place, or
        crashed on the partition in two fresh processes. The search runs in a fork of its own (it
        reads the TOSA with the serializer's native binding); whatever stops it, it says why, and
        the failure it searched stands."""
        from ethosweep.vela import refusals

        crashed = isinstance(error, ToolCrashed) or fault_of(error) is Fault.CRASH
        refusal = OPERATOR_REFUSAL.search(str(error)) and not NOT_AN_OPERATOR.search(str(error))
        if not (crashed or refusal):
            return Search(None, "")
        tries = itertools.count()

        def refuses(part: bytes) -> bool:
            try:  # a crash on a part counts as refusing it: one try (the partition's crash reproduced)
                self.compile(part, workdir / f"locate_{next(tries)}", retry_crash=False)
            except (ToolCrashed, ToolFailed) as failed:
                if of_the_machine(failed):
                    raise
                return True
            return False

        started = time.perf_counter()
        try:
            located = self.search(tosa, refuses, index, str(error), crashed)
        except StageError as stopped:  # the search must never replace the failure it searches
            if of_the_machine(stopped):
                raise
            return Search(None, " ".join(str(stopped).split())[:240])
        located.seconds = round(time.perf_counter() - started, 2)
        if crashed and located.compiled == 0:
            # every part crashed: the search narrowed nothing, and a crash is named by its signal
            return Search(None, f"no part of the partition compiled without crashing ({located.tries} Vela runs)")
        if not located.refused:
            # the parts, rebuilt from the partition's operators, compile: the crash needs it whole
            return Search(
                None, f"the partition's operators compile when Vela is given them apart ({located.tries} Vela runs)"
            )
        recorded = sources[index] if sources and index < len(sources) else {}
        located.refused = [refusals.name_in_model(r, recorded) for r in located.refused]
        return Search(located, "")

    def search(self, tosa: bytes, refuses, index: int, failure: str, crashed: bool):
        """refusals.locate on the partition, in a fork of its own. With a store set
        (ethosweep.runtime.cache), taken from it when the same Vela failed the same way on the same
        partition with the flags that decide what it refuses (search_flags), by the same search.
        Otherwise seeded by what the first cell to search this partition found (in the store, or
        without one in the lowering's own `searches/`): the cells of one partition differ only in
        Vela's flags, and a crash's search, keyed by every flag, would otherwise repeat in each
        (docs/failures.md). Until a seed is kept, a second cell waits for the first's answer
        instead of repeating it beside it."""
        from ethosweep.runtime import cache
        from ethosweep.runtime.codeversion import code_version
        from ethosweep.runtime.packages import stage_versions
        from ethosweep.vela import refusals

        of_partition = {
            "tosa": hashlib.sha256(tosa).hexdigest(),
            "vela": self.vela_version,  # another version than the installed one (in `tools`)
            "code": code_version("ethosweep.vela.partitions", "ethosweep.vela.refusals"),
            # every package Vela's run depends on (numpy, flatbuffers, ...), as a rule's key has them
            "tools": stage_versions("ethosweep.vela.compile"),
        }

        def searched() -> dict[str, bytes]:
            # a crash's parts keep the reshapes: other units than a refusal's, so another seed
            seed_key = {**of_partition, "crashed": crashed}
            with cache.seeded("refusal search's seed", seed_key, self.searches) as (seed, keep):
                with running(self.tool, f"locating what it refuses in partition {index}"):
                    located = call_in_child(
                        refusals.locate,
                        tosa,
                        refuses,
                        refusals.MAX_TRIES_CRASHED if crashed else refusals.MAX_TRIES,
                        crashed,
                        refusals.Location.of_stored(seed) if seed else None,
                        what="the search for refused operators",
                        retry_crash=False,
                    )
                stored = located.stored()
                keep(stored)
            return stored

        parts = {
            **of_partition,
            "flags": search_flags(self.flags, self.vela, crashed),
            "failure": re.sub(r"partition \d+", "partition", failure),
        }
        return refusals.Location.of_stored(cache.remembered("refusal search", parts, searched))


# Flags that place tensors in memories and set their speeds, not what Vela accepts: whether Vela
# refuses a part of a partition does not depend on them. Measured: the refusal search's whole trace
# (each part tried, compiled or refused) was the same under every pair of system config and memory
# mode tried, 4 on the Ethos-U55 and 4 to 8 on the Ethos-U65, for each of the 9 partitions Vela
# refused in the presets (docs/cache.md). Regor checks operators against the accelerator alone
# (regor.tflite_operator_constraints("EthosU55")).
PLACEMENT_FLAGS = ("--system-config=", "--memory-mode=", "--config=")


def search_flags(flags: list[str], vela: dict, crashed: bool) -> list[str]:
    """The flags a refusal search's result depends on: without the placement flags for a refusal;
    all of them, with the vela.ini's content, for a crash (a crash may depend on anything)."""
    if not crashed:
        return [f for f in flags if not f.startswith(PLACEMENT_FLAGS)]
    ini = hashlib.sha256(vela_ini_path(vela).read_bytes()).hexdigest()
    return [f"--config-sha256={ini}" if f.startswith("--config=") else f for f in flags]


@dataclass
class Search:
    """What looking for the refused operators found (`located`, a refusals.Location or None), or why it
    stopped (`stopped`: '' when it finished or was not needed)."""

    located: object
    stopped: str


def vela_failure(error: StageError, index: int, tosa: bytes, run: VelaRun, search: Search) -> VelaFailure:
    """The one-line failure of a cell's Vela run, after leaving a reproducer (and, where the
    refused operators were found, the smallest part of the partition that still fails)."""
    version = run.vela_version or tool_versions()["vela"]
    message = str(error).removeprefix(f"Vela on partition {index}: ")
    crash = _crash_signal(error, message)
    located = search.located
    does_not_fit = {}  # the summary's status: the cell does not fit its configuration, nothing failed
    fault = Fault.CRASH if crash else Fault.REFUSED if located is not None and located.refused else fault_of(error)
    if located is not None and located.refused:
        named = _named(located.refused)
        what = f"crashed ({crash}){_twice(error)}" if crash else message
        # the search's cost is in the details, not the reason: a seeded search (VelaRun.search) costs
        # less than the first, and a cell's reason must not depend on which of its siblings ran first
        reason = (
            f"Vela {version} cannot compile {named} in partition {index} on {run.where}: {what} (found by "
            f"Vela on parts of it{'' if located.complete else ', stopped at the limit'})"
        )
    elif crash:
        reason = f"{run.tool} crashed ({crash}) compiling partition {index} for {run.where}{_twice(error)}"
    elif too_large := DOES_NOT_FIT.search(message):
        needs, limit = (int(n) for n in too_large.groups())
        does_not_fit = {"sram_bytes_needed": needs, "sram_bytes_given": limit}
        reason = (
            f"does not fit: {run.tool} needs {needs:,} bytes of SRAM for partition {index}'s tensors, "
            f"{run.where} gives it {limit:,} (Vela: Failed to allocate tensors)"
        )
    else:
        reason = f"{run.tool} failed on partition {index}: {message}"
    reproduced = bool(getattr(error, "reproduced", False))
    if search.stopped:
        reason += f"; the search for the operator it refuses stopped: {search.stopped}"
    folder = write_reproducer(run.repro, tosa, index, run.flags, run.vela, reason, run.vela_version)
    if located is not None and located.minimal_tosa:
        name = f"partition_{index}_refused.tosa"
        (folder / name).write_bytes(located.minimal_tosa)
        with open(folder / "README.txt", "a") as readme:
            readme.write(
                f"\n{name}: the smallest part of the partition that {run.tool} still refuses (the same command "
                f"with {name} in place of partition_{index}.tosa reproduces it).\n"
            )
    details = {"refused": [r.as_dict() for r in located.refused], "located": located.cost()} if located else {}
    if located is not None and not located.refused:
        details = {}
    if search.stopped:
        details["search_stopped"] = search.stopped
    if does_not_fit:
        details["does_not_fit"] = does_not_fit
    return VelaFailure(
        f"{reason} (reproducer: {folder}/)", fault, reproducer=f"{folder}/", details=details, reproduced=reproduced
    )


def _named(refused: list) -> str:
    """The refused parts as a reason names them, three at most; parts refused as the same operators
    are listed under one description ('a, b, c and 3 more (slice, int8 in + reshape, ...)'): a
    transformer's blocks repeat, and the reason keeps room for what the fallback then found."""
    groups: dict[str, list[str]] = {}
    for part in refused:
        where, sep, terms = part.description.rpartition(" (")
        groups.setdefault(f" ({terms}" if sep else "", []).append(where if sep else part.description)
    said = [
        ", ".join(wheres[:3]) + (f" and {len(wheres) - 3} more" if wheres[3:] else "") + terms
        for terms, wheres in groups.items()
    ]
    return "; ".join(said[:3]) + (f"; and {len(said) - 3} more" if said[3:] else "")


def _twice(error: StageError) -> str:
    return ", twice in fresh processes" if getattr(error, "reproduced", False) else ""


def _crash_signal(error: StageError, message: str) -> str:
    """The signal a crash died of ('SIGSEGV'), or '' for a failure that is not a crash."""
    if isinstance(error, ToolCrashed):
        return error.signal_name
    if fault_of(error) is Fault.CRASH:  # another Vela version's process, as the child reported it
        found = re.search(r"crashed \(([^)]+)\)", message)
        return found.group(1) if found else "crash"
    return ""


# ---- reproducers ------------------------------------------------------------------------


def vela_ini_path(vela: dict) -> Path:
    """The vela.ini file the cell's flags name: a user's file, or the one inside Vela."""
    if vela.get("config"):
        return Path(vela["config"])
    return tg.builtin_vela_ini_path()


def write_reproducer(
    folder: Path, tosa: bytes, index: int, flags: list[str], vela: dict, reason: str, vela_version: str | None = None
) -> Path:
    """The partition's TOSA, the vela.ini and the command line that reproduce a Vela failure
    (`vela_version`: another version than the installed one, run with uv from the registry)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tosa_name = f"partition_{index}.tosa"
    (folder / tosa_name).write_bytes(tosa)
    versions = tool_versions()
    version = vela_version or versions["vela"]
    if vela_version is None:
        shutil.copyfile(vela_ini_path(vela), folder / "vela.ini")
        args = ["--config=./vela.ini" if f.startswith("--config=") else f for f in flags]
    else:  # that version's own Arm/vela.ini (or the user's file) is what it read
        if vela.get("config"):
            shutil.copyfile(vela_ini_path(vela), folder / "vela.ini")
        args = ["--config=./vela.ini" if f.startswith("--config=") and vela.get("config") else f for f in flags]
    command = ["vela", tosa_name, *args, "--output-dir=output", *REPORT_FLAGS]
    launcher = "uv run" if vela_version is None else f"uvx --from ethos-u-vela=={vela_version}"
    script = command if vela_version is None else ["uvx", "--from", f"ethos-u-vela=={vela_version}", *command]
    (folder / "command.sh").write_text(
        "#!/bin/sh\n# Reproduces the Vela failure described in README.txt.\n"
        f'cd "$(dirname "$0")"\n{shlex.join(script)}\n'
    )
    (folder / "command.sh").chmod(0o755)
    (folder / "README.txt").write_text(
        f"Vela {version} failed on this partition: {reason}\n\n"
        "Reproduce it outside ethosweep, from the folder the sweep ran in:\n\n"
        f"    {'uv run sh' if vela_version is None else 'sh'} {folder}/command.sh\n\n"
        f"or, wherever ethos-u-vela {version} is installed, in this folder:\n\n"
        f"    {shlex.join(command)}\n\n"
        f"({launcher} provides it.) "
        f"Files: {tosa_name} (the partition's TOSA, as ExecuTorch {versions['executorch']} lowered it), "
        + ("vela.ini (the system configs and memory modes the flags name), " if (folder / "vela.ini").exists() else "")
        + "command.sh (the command above).\n"
        "Attach this folder to a report to Vela's maintainers: "
        "https://gitlab.arm.com/artificial-intelligence/ethos-u/ethos-u-vela/-/issues\n"
    )
    return folder
