"""Stage 4, vela: per cell, one Vela run per partition and the cell's .pte.

The lower stage keeps each (model, scheme, TOSA profile)'s program with the TOSA of
every delegated partition as its payload (the *template*). For a cell this stage
1. compiles each partition's TOSA with ExecuTorch's own Vela entry point
   (`executorch.backends.arm.arm_vela.vela_compile`, what EthosUBackend.preprocess calls)
   and the cell's Vela flags, so the payload is the one the Ethos-U backend embeds;
   `--verbose-performance` makes the same run write the per-layer CSV and the summary;
2. puts the payloads and the cell's compile specs into the template and serialises it
   with ExecuTorch's .pte serialiser: byte-identical to what to_edge_transform_and_lower
   with EthosUPartitioner gives for the cell (tests/test_compile_once.py).

Vela runs in a forked child (ethosweep.runtime.isolation): a crash in its native compiler fails
this cell with the signal's name, and the partition's TOSA, the vela.ini and the exact
command line are kept in `repro/` beside the cell's outputs to reproduce it outside the sweep.

A cell of another Vela version than the installed one (`vela: {versions: [...]}`) runs that
version's `vela` command from its own environment (ethosweep.vela.environment) as a separate
process, with the same flags on the same TOSA, inside the same `vela_compile`: only the call
of Vela's `main` is replaced, so its output is packed into the payload by ExecuTorch's own code.

All numbers are Vela's *compiler estimates* (its performance model), not measurements.
Cell figures from several partitions: the partitions run one after another, so cycles,
MACs, inference time and off-chip/flash traffic add up, while the SRAM arena is reused
by each in turn, so the cell's SRAM need is the largest partition's. Weights and command
streams are stored side by side, so flash and DRAM use add up.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import logging
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ethosweep.compile.compile_spec import cell_compile_specs, vela_flags
from ethosweep.compile.lowering import delegate_payloads
from ethosweep.matrix import targets as tg
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import StageError
from ethosweep.runtime.integrity import verify
from ethosweep.runtime.io import atomic_write_bytes, atomic_write_text, read_json, write_json
from ethosweep.runtime.isolation import ToolCrashed, ToolFailed, call_in_child, signal_name
from ethosweep.runtime.provenance import tool_versions

log = logging.getLogger(__name__)

# Run through ExecuTorch's vela_compile, never imported here: a Vela upgrade reruns this stage
# (ethosweep.runtime.packages). A cell of another Vela version runs that version instead.
ALSO_RUNS = ("ethos-u-vela",)

# Summary fields that add up over partitions, and those where the cell needs the largest.
SUMMED = (
    "cycles_total",
    "cycles_npu",
    "cycles_sram_access",
    "cycles_dram_access",
    "cycles_on_chip_flash_access",
    "cycles_off_chip_flash_access",
    "nn_macs",
    "inference_time",
    "dram_memory_used",
    "on_chip_flash_memory_used",
    "off_chip_flash_memory_used",
    "total_original_weights",
    "total_npu_encoded_weights",
    "sram_total_bytes",
    "dram_total_bytes",
    "on_chip_flash_total_bytes",
    "off_chip_flash_total_bytes",
)
PEAK = ("sram_memory_used",)
SHARED = (
    "accelerator_configuration",
    "system_config",
    "memory_mode",
    "core_clock",
    "arena_cache_size",
    "weights_storage_area",
    "feature_map_storage_area",
)

# Added to the cell's flags for this run only: the per-layer CSV. It changes no byte of
# Vela's output (checked in tests/test_compile_once.py), and the .pte records the flags
# without it, as aot_arm_compiler's does.
REPORT_FLAGS = ("--verbose-performance",)


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


def aggregate(partitions: list[dict]) -> dict:
    """One cell's figures from its partitions' summaries (see the module docstring)."""
    if not partitions:
        return {}
    cell = {key: partitions[0].get(key) for key in SHARED}
    for key in SUMMED:
        cell[key] = sum(p.get(key) or 0 for p in partitions)
    for key in PEAK:
        cell[key] = max(p.get(key) or 0 for p in partitions)
    cell["partitions"] = len(partitions)
    cell["inference_time_ms"] = cell["inference_time"] * 1e3
    cell["inferences_per_second"] = 1.0 / cell["inference_time"] if cell["inference_time"] else None
    cell["mac_utilisation"] = mac_utilisation(
        cell["nn_macs"], cell["cycles_total"], partitions[0].get("accelerator_configuration")
    )
    return cell


def mac_utilisation(macs: int, cycles: int, accelerator: str | None) -> float | None:
    """Achieved MACs per cycle over the accelerator's peak (the number in its name)."""
    try:
        peak = int(str(accelerator).rsplit("_", 1)[-1])
    except ValueError:
        return None
    return macs / (cycles * peak) if cycles else None


def _layers_csv(rows: list[dict]) -> str:
    if not rows:
        return "partition\n"
    fields = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


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
        print(proc.stdout + proc.stderr, flush=True)
        if proc.returncode < 0:
            raise StageError(f"crashed ({signal_name(-proc.returncode)})")
        if proc.returncode != 0:
            raise StageError(vela_error_message(proc.stdout + "\n" + proc.stderr))
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
    tosa: bytes, flags: list[str], workdir: Path, what: str, vela_command: str | None = None
) -> tuple[bytes, dict, list[dict]]:
    """Vela on one partition's TOSA: (payload, summary row, per-layer rows)."""
    workdir.mkdir(parents=True, exist_ok=True)
    payload = call_in_child(_vela_in_child, tosa, flags, str(workdir), vela_command, what=what)
    (summary_file,) = sorted((workdir / "output").glob("out_summary_*.csv"))
    return payload, read_summary(summary_file), read_per_layer(workdir / "output" / "out_per-layer.csv")


# ---- the cell's .pte --------------------------------------------------------------------


def assemble_pte(template: bytes, payloads: list[bytes], compile_specs: list[tuple[str, bytes]]) -> bytes:
    """The template with each delegate's payload and compile specs replaced, serialised.

    Delegate data is shared between delegates with identical payloads, in order of first
    use, as ExecuTorch's emitter does (it keys them by a hash of the payload).
    """
    from executorch.exir import schema
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    pte = deserialize_pte_binary(template)
    program = pte.program
    delegates = [d for plan in program.execution_plan for d in plan.delegates]
    if len(delegates) != len(payloads):
        raise StageError(f"the template has {len(delegates)} delegates, but {len(payloads)} payloads were compiled")
    index_of: dict[bytes, int] = {}
    data = []
    for delegate, payload in zip(delegates, payloads):
        key = hashlib.sha256(payload).digest()
        if key not in index_of:
            index_of[key] = len(data)
            data.append(schema.BackendDelegateInlineData(data=payload))
        delegate.processed = schema.BackendDelegateDataReference(
            location=delegate.processed.location, index=index_of[key]
        )
        delegate.compile_specs = [schema.CompileSpec(key=k, value=v) for k, v in compile_specs]
    program.backend_delegate_data = data
    return bytes(serialize_pte_binary(pte))


def scratch_bytes(payloads: list[bytes]) -> int:
    """The largest Ethos-U scratch buffer the cell's delegates ask for (the command stream's
    `scratch_size` block), read with ExecuTorch's own reader (get_ethosu_scratch_from_pte, which
    reads the same payloads back out of the .pte)."""
    from executorch.backends.arm.scripts.get_ethosu_scratch_from_pte import get_scratch_size_from_delegate

    return max((get_scratch_size_from_delegate(p) or 0 for p in payloads), default=0)


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


# ---- the stage ------------------------------------------------------------------------


def compile_cell(
    template: str,
    lower_meta: str,
    target: str,
    system_config: str,
    memory_mode: str,
    vela: dict,
    pte: str,
    summary: str,
    per_layer: str,
    meta: str,
    repro: str,
    vela_version: str | None = None,
    vela_env: str | None = None,
    tosa_sources: str | None = None,
    quantized: str | None = None,
    profile: str | None = None,
    keep_on_cpu: list[dict] = (),
    fallback: bool = True,
) -> dict:
    """Compile one cell: Vela on every partition, the cell's .pte, Vela's reports, metadata.

    `repro`: the folder a Vela failure leaves its reproducer in (removed after a success).
    `vela_version`, `vela_env`: another Vela version than the installed one, and the env.json of
    its environment (ethosweep.vela.environment); None compiles with the installed Vela.
    `tosa_sources`: the lower stage's record of where each TOSA tensor comes from, to name the
    operators Vela refuses in the model's terms (ethosweep.vela.refusals).
    `quantized`, `profile`, `keep_on_cpu`, `fallback`: when Vela refuses operators and `fallback`
    is on, the quantized program is lowered again for the profile with them kept on the CPU (beside
    what the model's config keeps there), and the cell compiles from that lowering.
    """
    environment = read_json(vela_env) if vela_version is not None else None
    if environment is not None and environment["version"] != vela_version:
        raise StageError(f"{vela_env} holds Vela {environment['version']}, not {vela_version}: delete it and rerun")
    vela_command = environment["vela"] if environment else None
    versions = {**tool_versions(), "vela": vela_version or tool_versions()["vela"]}
    lowered = read_json(lower_meta)
    template_bytes = verify(template, lowered["template_bytes"], lowered["template_sha256"], "the lower stage")
    tosas = delegate_payloads(template_bytes)
    flags = vela_flags(target, system_config, memory_mode, vela)
    where = f"{target} / {memory_mode}" + (
        f" ({system_config})" if system_config != tg.DEFAULT_SYSTEM_CONFIG[tg.family(target)] else ""
    )
    sources = read_json(tosa_sources) if tosa_sources else None
    run = VelaRun(flags, where, vela_command, vela_version, Path(repro), vela)
    fallback_record = None
    try:
        payloads, rows, layers = run.compile_all(tosas, sources)
    except VelaFailure as refused:
        if not (fallback and quantized and refused.kept_nodes):
            raise
        # what Vela refused, kept on the CPU: the model lowered again for this cell's profile with
        # those nodes left out of the partitions (the same lowering, with keep_on_cpu), then Vela again
        started = time.perf_counter()
        from ethosweep.compile.artifacts import load_quantized
        from ethosweep.compile.lowering import lower_program

        program, problem = load_quantized(quantized), None
        for nodes in refused.fallbacks():
            why = f"refused by Vela {versions['vela']} on {where}, kept on the CPU (vela.fallback)"
            keep = [*keep_on_cpu, *({"node": n, "why": why} for n in nodes)]
            try:
                with running("ExecuTorch's Arm lowering", f"lowering again with {len(nodes)} node(s) on the CPU"):
                    relowered = lower_program(program, profile, keep)
                # whether the rest compiles: not explained again (no locating, the refusal's reproducer kept)
                payloads, rows, layers = run.compile_all(delegate_payloads(relowered.template), explain=False)
            except VelaFailure as again:
                problem = f"Vela refused the rest too: {again.reason}"
                continue
            except StageError as error:  # ExecuTorch could not lower the model with them on the CPU
                problem = f"ExecuTorch could not lower the rest: {str(error)[:300]}"
                continue
            problem = None
            break
        if problem is not None:
            raise VelaFailure(
                f"{refused.reason}; falling back (those operators on the CPU) did not work: {problem}",
                reproducer=refused.reproducer,
                details={**refused.details, "fallback": problem},
            ) from refused
        template_bytes = relowered.template
        lowered = {**lowered, "planned_buffer_bytes": relowered.planned, "delegated": relowered.table["delegated"]}
        lowered["template_sha256"] = hashlib.sha256(relowered.template).hexdigest()
        fallback_record = {
            **refused.details,
            "reason": refused.reason,
            "reproducer": refused.reproducer,
            "keep_on_cpu": keep,
            "delegation": relowered.table,
            "seconds": round(time.perf_counter() - started, 2),
        }
    pte_bytes = assemble_pte(template_bytes, payloads, cell_compile_specs(target, system_config, memory_mode, vela))
    if fallback_record is None:  # a reproducer of an earlier failure no longer applies
        shutil.rmtree(repro, ignore_errors=True)

    cell = aggregate(rows)
    atomic_write_text(per_layer, _layers_csv(layers))
    write_json(
        summary,
        {
            "source": "Vela compiler estimate (not a measurement)",
            "vela_flags": flags,
            "cell": cell,
            "partitions": rows,
            "versions": versions,
            **({"fallback": fallback_record} if fallback_record else {}),
        },
    )
    atomic_write_bytes(pte, pte_bytes)
    record = {
        "target": target,
        "system_config": system_config,
        "memory_mode": memory_mode,
        "vela_options": vela,
        "vela_flags": flags,
        "pte_bytes": len(pte_bytes),
        "pte_sha256": hashlib.sha256(pte_bytes).hexdigest(),
        "planned_buffer_bytes": lowered["planned_buffer_bytes"],
        # the runner's scratch pool holds the largest (ethosweep.firmware reads it here, torch-free)
        "scratch_bytes": scratch_bytes(payloads),
        "template_sha256": lowered["template_sha256"],
        "partitions": [
            {"index": i, "tosa_sha256": hashlib.sha256(t).hexdigest(), "payload_bytes": len(p)}
            for i, (t, p) in enumerate(zip(tosas, payloads))
        ],
        "delegated": lowered["delegated"],
        "versions": versions,
        # what Vela refused and kept on the CPU, when the cell compiled from a lowering without it
        **({"fallback": fallback_record} if fallback_record else {}),
        # the environment another Vela version ran from: its lock pins every package
        **({"vela_environment": {k: environment[k] for k in ("lock_sha256", "packages")}} if environment else {}),
    }
    write_json(meta, record)
    if cell:
        log.info(
            "Vela estimate: %d cycles total (%d NPU), %.3f ms, SRAM %.1f KiB, off-chip flash %.1f KiB, %d MACs; .pte "
            "%d bytes",
            cell["cycles_total"],
            cell["cycles_npu"],
            cell["inference_time_ms"],
            cell["sram_memory_used"],
            cell["off_chip_flash_memory_used"],
            cell["nn_macs"],
            len(pte_bytes),
        )
    else:
        log.info("no delegated partitions: nothing runs on the NPU; .pte %d bytes", len(pte_bytes))
    return record


class VelaFailure(StageError):
    """A cell's Vela run failed: `reason` (without the reproducer), `reproducer`, `details` (what was
    located: `refused`), `kept_nodes` (the model's nodes of what Vela refused, to keep on the CPU)."""

    def __init__(self, message: str, recorded: bool = True, reproducer: str = "", details: dict | None = None):
        super().__init__(message)
        self.reason = message.split(" (reproducer: ")[0]
        self.recorded = recorded
        self.reproducer = reproducer
        self.details = details or {}

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

    @property
    def tool(self) -> str:
        return "Vela" if self.vela_version is None else f"Vela {self.vela_version}"

    def compile_all(
        self, tosas: list[bytes], sources: list | None = None, explain: bool = True
    ) -> tuple[list, list, list]:
        """(payloads, summary rows, per-layer rows) of every partition; VelaFailure on the first
        partition Vela refuses, with (`explain`) what it refuses located and named (`sources`) and
        a reproducer."""
        payloads, rows, layers, compiled = [], [], [], {}
        with tempfile.TemporaryDirectory(prefix="ethosweep-vela-") as tmp:
            for index, tosa in enumerate(tosas):
                key = hashlib.sha256(tosa).hexdigest()
                if key not in compiled:  # a partition identical to an earlier one compiles identically
                    try:
                        with running(self.tool, f"compiling partition {index} for {self.where}"):
                            compiled[key] = self.compile(tosa, Path(tmp) / f"partition_{index}", index)
                    except (ToolCrashed, ToolFailed) as error:
                        if not explain:
                            raise VelaFailure(f"{self.tool} failed on partition {index}: {error}", error.recorded)
                        located = self.locate(error, tosa, index, sources, Path(tmp))
                        raise _vela_failure(
                            error,
                            index,
                            self.where,
                            self.repro,
                            tosa,
                            self.flags,
                            self.vela,
                            self.vela_version,
                            located,
                        ) from error
                payload, row, layer_rows = compiled[key]
                payloads.append(payload)
                rows.append({**row, "partition": index})
                layers.extend({"partition": index, **layer} for layer in layer_rows)
        return payloads, rows, layers

    def compile(self, tosa: bytes, workdir: Path, index: int | None = None):
        what = "Vela on a part" if index is None else f"Vela on partition {index}"
        return compile_partition(tosa, self.flags, workdir, what=what, vela_command=self.vela_command)

    def locate(self, error: StageError, tosa: bytes, index: int, sources: list | None, workdir: Path):
        """The operators of the partition Vela refuses (ethosweep.vela.refusals), by the same Vela with
        the same flags on parts of it, or None when the failure is not an operator's."""
        from ethosweep.vela import refusals

        crashed = isinstance(error, ToolCrashed)
        if (crashed and error.signal_name == "SIGKILL") or not (crashed or OPERATOR_REFUSAL.search(str(error))):
            return None
        tries = itertools.count()

        def refuses(part: bytes) -> bool:
            try:
                self.compile(part, workdir / f"locate_{next(tries)}")
            except (ToolCrashed, ToolFailed):
                return True
            return False

        started = time.perf_counter()
        with running(self.tool, f"locating what it refuses in partition {index}"):
            located = refusals.locate(tosa, refuses)
        located.seconds = round(time.perf_counter() - started, 2)
        recorded = sources[index] if sources and index < len(sources) else {}
        located.refused = [refusals.name_in_model(r, recorded) for r in located.refused]
        return located


# Vela's words for an operator it cannot place (as opposed to a configuration it rejects, which no
# operator of the partition causes): only then are the refused operators looked for.
OPERATOR_REFUSAL = re.compile(r"operation|operator|could not run on NPU|not supported|unsupported", re.I)


def _vela_failure(
    error: StageError,
    index: int,
    where: str,
    repro: Path,
    tosa: bytes,
    flags: list[str],
    vela: dict,
    vela_version: str | None = None,
    located=None,
) -> VelaFailure:
    """The one-line failure of a cell's Vela run, after leaving a reproducer (and, where the
    refused operators were found, the smallest part of the partition that still fails)."""
    tool = "Vela" if vela_version is None else f"Vela {vela_version}"
    version = vela_version or tool_versions()["vela"]
    message = str(error).removeprefix(f"Vela on partition {index}: ")
    if isinstance(error, ToolCrashed) and error.signal_name == "SIGKILL":
        reason = f"{tool} was killed (SIGKILL) compiling partition {index} for {where}: out of memory?"
    elif located is not None and located.refused:
        named = "; ".join(r.description for r in located.refused[:3]) + (
            f"; and {len(located.refused) - 3} more" if located.refused[3:] else ""
        )
        what = f"crashed ({error.signal_name})" if isinstance(error, ToolCrashed) else message
        reason = (
            f"Vela {version} cannot compile {named} in partition {index} on {where}: {what} (found in "
            f"{located.tries} Vela runs on parts of it{'' if located.complete else ', stopped at the limit'})"
        )
    elif isinstance(error, ToolCrashed):
        reason = f"{tool} crashed ({error.signal_name}) compiling partition {index} for {where}"
    else:
        reason = f"{tool} failed on partition {index}: {message}"
    folder = write_reproducer(repro, tosa, index, flags, vela, reason, vela_version)
    if located is not None and located.minimal_tosa:
        name = f"partition_{index}_refused.tosa"
        (folder / name).write_bytes(located.minimal_tosa)
        with open(folder / "README.txt", "a") as readme:
            readme.write(
                f"\n{name}: the smallest part of the partition that {tool} still refuses (the same command "
                f"with {name} in place of partition_{index}.tosa reproduces it).\n"
            )
    return VelaFailure(
        f"{reason} (reproducer: {folder}/)",
        recorded=error.recorded,
        reproducer=f"{folder}/",
        # what was refused, and what finding it cost (Vela runs, seconds): the cell's record keeps both
        details={"refused": [r.as_dict() for r in located.refused], "located": located.cost()}
        if located and located.refused
        else {},
    )
