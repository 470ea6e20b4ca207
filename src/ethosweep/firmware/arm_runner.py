"""ExecuTorch's arm_executor_runner on a Corstone FVP, as stages: pool sizes from the .pte, the commands
ExecuTorch's scripts run, and a parser of the bare-metal runner's output.

One runner per (target, system config, memory mode), built with `--pte=semihosting`, serves
every model of the sweep: the Corstone FVP hands it the cell's .pte through semihosting at run
time. A runner with the .pte linked in would cost a 3-4 minute cold CMake build per cell instead
of one per configuration (ExecuTorch's measured cold build here); the header stage still writes
the linkable C array per cell for boards without semihosting. The runner's memory pools must
hold the largest model it will run, so they are sized from every cell it serves.

Torch-free: the pools are sized from the records of the stages that made the .pte and the inputs
(the Vela job's scratch and planned buffer bytes, the export's input bytes), so a firmware plan is a
light job of its own process, not a warm worker's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ethosweep.matrix.targets import CPU_BY_FAMILY, FVP_BY_FAMILY, family
from ethosweep.runtime.errors import Fault, StageError, fault_of_process, machine_line
from ethosweep.runtime.io import atomic_write_text, read_json, write_json
from ethosweep.runtime.outcome import failure_of

KIB = 1024
# The method allocator also holds the program's metadata, tensors' and values' descriptors and
# the inputs' copies (`method_allocator_loaded`, `_input` in the runner's report): a margin
# over the planned buffers, rounded to 16 KiB.
METHOD_POOL_MARGIN = 64 * KIB
POOL_ALIGN = 16 * KIB


def _align(value: int, to: int = POOL_ALIGN) -> int:
    return (value + to - 1) // to * to


@dataclass(frozen=True)
class Pools:
    method_allocator: int  # ET_ARM_BAREMETAL_METHOD_ALLOCATOR_POOL_SIZE
    scratch: int  # ET_ARM_BAREMETAL_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE (or FAST_ for Dedicated_Sram)
    dedicated_sram: bool

    def cmake_flags(self) -> list[str]:
        scratch_flag = (
            "ET_ARM_BAREMETAL_FAST_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE"
            if self.dedicated_sram
            else "ET_ARM_BAREMETAL_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE"
        )
        return [
            f"-DET_ARM_BAREMETAL_METHOD_ALLOCATOR_POOL_SIZE={self.method_allocator:#x}",
            f"-D{scratch_flag}={self.scratch:#x}",
        ]


def size_pools(cells: list[dict], memory_mode: str) -> Pools:
    """Pools for a runner that must run every cell given ({planned_buffer_bytes, input_bytes,
    scratch_bytes} each): the largest need of each pool, with the method allocator's margin."""
    method = max((c["planned_buffer_bytes"] + c["input_bytes"] for c in cells), default=0)
    scratch = max((c["scratch_bytes"] for c in cells), default=0)
    return Pools(
        method_allocator=_align(method + METHOD_POOL_MARGIN),
        scratch=_align(max(scratch, 1)),
        dedicated_sram=memory_mode.startswith("Dedicated_Sram"),
    )


@dataclass(frozen=True)
class RunnerConfig:
    """The configuration one runner serves: every cell of a (target, system config, memory mode)."""

    target: str
    system_config: str
    memory_mode: str

    def folder(self) -> str:
        return f"{self.target}/{self.system_config}/{self.memory_mode}"


@dataclass(frozen=True)
class ServedCells:
    """The cells a runner serves, with the records its pools are sized from (same order)."""

    cells: list[str]
    compile_meta: list[str]
    export_meta: list[str]


def build_command(
    executorch_src: str,
    config: RunnerConfig,
    pools: Pools,
    output: str,
    tools_dir: str | None = None,
    toolchain: str = "arm-none-eabi-gcc",
    bundleio: bool = True,
) -> list[str]:
    """ExecuTorch's build_executor_runner.sh for a semihosting runner of one configuration."""
    command = [
        "bash",
        f"{executorch_src}/backends/arm/scripts/build_executor_runner.sh",
        "--pte=semihosting",
        f"--target={config.target}",
        f"--system_config={config.system_config}",
        f"--memory_mode={config.memory_mode}",
        f"--toolchain={toolchain}",
        f"--output={output}",
        f"--et_build_root={output}/et",
        "--extra_build_flags=" + " ".join(pools.cmake_flags()),
    ]
    if tools_dir:
        command.append(f"--ethosu_tools_dir={tools_dir}")
    if bundleio:
        command.append("--bundleio")
    return command


def num_macs(target: str) -> int:
    return int(target.rsplit("-", 1)[1])


def fvp_command(target: str, elf: str, program: str, timelimit_s: int = 600, fvp: str | None = None) -> list[str]:
    """The FVP command line ExecuTorch's run_fvp.sh builds for the target's family, with the
    .pte/.bpte handed to the semihosting runner (-m) from its own folder."""
    fam = family(target)
    fvp = fvp or FVP_BY_FAMILY[fam]
    program_path = Path(program)
    semihosting = [
        "cpu0.semihosting-enable=1",
        "cpu0.semihosting-stack_base=0",
        "cpu0.semihosting-heap_limit=0",
        f"cpu0.semihosting-cwd={program_path.parent}",
        f"cpu0.semihosting-cmd_line=executor_runner -m {program_path.name}",
    ]
    if fam == "ethos-u85":
        board = "mps4_board"
        settings = [
            f"{board}.subsystem.ethosu.num_macs={num_macs(target)}",
            f"{board}.visualisation.disable-visualisation=1",
            "vis_hdlcd.disable_visualisation=1",
        ]
    else:
        board = "mps3_board"
        settings = [f"ethosu.num_macs={num_macs(target)}", f"{board}.visualisation.disable-visualisation=1"]
    settings += [
        f"{board}.telnetterminal0.start_telnet=0",
        f"{board}.uart0.out_file=-",
        f"{board}.uart0.shutdown_on_eot=1",
        *semihosting,
    ]
    command = [fvp]
    for setting in settings:
        command += ["-C", setting]
    return command + ["-a", elf, "--timelimit", str(timelimit_s)]


# ---- the runner's output ------------------------------------------------------------------

_LOG_PREFIX = re.compile(r"^[IWEF]\s*\[?executorch:[^\]]*\]\s?")
_INT_FIELDS = {
    "npu_cycles": r"ethos-u\s*:\s*cycle_cnt\s*:\s*(\d+)\s*cycles",
    "cpu_cycles_total": r"Inference runtime:\s*(\d+)\s*CPU cycles total",
    "cpu_wait_for_npu_cycles": r"cpu_wait_for_npu_cntr\s*:\s*(\d+)",
    "pmu_cycle_counter": r"ethosu_pmu_cycle_cntr\s*:\s*(\d+)",
    "npu_inferences": r"NPU Inferences\s*:\s*(\d+)",
    "pte_loaded_bytes": r"model_pte_loaded_size:\s*(\d+)\s*bytes",
    "method_allocator_planned_bytes": r"method_allocator_planned:\s*(\d+)\s*bytes",
    "method_allocator_loaded_bytes": r"method_allocator_loaded:\s*(\d+)\s*bytes",
    "method_allocator_input_bytes": r"method_allocator_input:\s*(\d+)\s*bytes",
    "method_allocator_executor_bytes": r"method_allocator_executor:\s*(\d+)\s*bytes",
}
_USED_OF = {
    "method_allocator": r"method_allocator_used:\s*(\d+)\s*/\s*(\d+)",
    "temp_allocator": r"temp_allocator_used:\s*(\d+)\s*/\s*(\d+)",
}
_FAILURE = re.compile(
    r"^(F |E |\[critical\]|Hard fault|Info: Simulation is stopping\. Reason: CPU time has been exceeded)"
)


def parse_executor_runner_output(text: str) -> dict:
    """The numbers the bare-metal runner prints (arm_executor_runner.cpp, arm_perf_monitor.cpp),
    as JSON: cycles, PMU counters, allocator use, outputs, BundleIO verdict and completion."""
    lines = [line.rstrip("\r") for line in text.splitlines()]
    plain = "\n".join(_LOG_PREFIX.sub("", line) for line in lines)
    result: dict = {}
    for key, pattern in _INT_FIELDS.items():
        match = re.search(pattern, plain)
        result[key] = int(match.group(1)) if match else None
    for key, pattern in _USED_OF.items():
        match = re.search(pattern, plain)
        result[f"{key}_used_bytes"] = int(match.group(1)) if match else None
        result[f"{key}_pool_bytes"] = int(match.group(2)) if match else None
    result["pmu_counters"] = {int(i): int(v) for i, v in re.findall(r"ethosu_pmu_cntr(\d+)\s*:\s*(\d+)", plain)}
    events = re.search(r"Ethos-U PMU Events:\[([^\]]*)\]", plain)
    result["pmu_events"] = [e.strip() for e in events.group(1).split(",")] if events else []
    outputs: dict[int, dict[int, float]] = {}
    for i, j, value in re.findall(r"^Output\[(\d+)\]\[(\d+)\]:\s*(\S+)", plain, flags=re.MULTILINE):
        outputs.setdefault(int(i), {})[int(j)] = float(value)
    result["outputs"] = {i: [values[j] for j in sorted(values)] for i, values in sorted(outputs.items())}
    result["output_indices"] = {i: sorted(values) for i, values in sorted(outputs.items())}
    bundle = re.findall(r"Test_result:\s*(PASS|FAIL)", plain)
    result["bundleio"] = ("FAIL" if "FAIL" in bundle else "PASS") if bundle else None
    result["completed"] = "Program complete, exiting." in plain
    result["errors"] = [line for line in lines if _FAILURE.match(line)]
    return result


# ---- stages -------------------------------------------------------------------------------


def input_bytes(export_meta: dict) -> int:
    """Bytes of a model's example inputs (the runner copies them into the method allocator), as
    the export stage recorded them."""
    return sum(spec.get("bytes", 0) for spec in export_meta["inputs"])


def plan_runner(
    config: RunnerConfig,
    served: ServedCells,
    sdk: str,
    sdk_config: dict,
    bundleio: bool,
    plan: str,
    timelimit_s: int = 600,
) -> dict:
    """What the runner of one configuration needs (pools sized from every cell it serves), the
    commands that build and run it, and whether this machine can: written whether or not it can,
    so the summary says per cell what is missing."""
    sdk = read_json(sdk)  # the check_sdk job's findings
    needs = _needs(served)
    pools = size_pools(needs, config.memory_mode)
    src = sdk["components"]["executorch_src"]["found"] or "<sdk.executorch_src>"
    output = f"results/firmware/{config.folder()}/build"
    fam = family(config.target)
    fvp = sdk["components"][f"fvp:{fam}"]
    program = "model.bpte" if bundleio else "model.pte"
    tools = {
        "tools_dir": sdk_config.get("ethos_u_tools_dir"),
        "toolchain": sdk_config.get("toolchain", "arm-none-eabi-gcc"),
    }
    result = {
        "target": config.target,
        "system_config": config.system_config,
        "memory_mode": config.memory_mode,
        "cpu": CPU_BY_FAMILY[fam],
        "fvp": FVP_BY_FAMILY[fam],
        "fvp_path": fvp["found"],
        "cells": needs,
        "pools": {
            "method_allocator_bytes": pools.method_allocator,
            "scratch_bytes": pools.scratch,
            "scratch_pool": "fast (SRAM), arena in DRAM" if pools.dedicated_sram else "SRAM",
        },
        "firmware": sdk["firmware"],
        "run": run_line(sdk["firmware"] == "ready", fvp),
        "build_command": build_command(src, config, pools, output, **tools, bundleio=bundleio),
        "fvp_command_example": fvp_command(
            config.target,
            f"{output}/arm_executor_runner",
            f"results/bundle/<cell>/{program}" if bundleio else f"results/vela/<cell>/{program}",
            timelimit_s,
            fvp=fvp["found"],
        ),
    }
    write_json(plan, result)
    print(
        f"{config.folder()}: method pool {pools.method_allocator // KIB} KiB, "
        f"scratch pool {pools.scratch // KIB} KiB for {len(needs)} cell(s); firmware: {result['firmware']}"
    )
    return result


def _needs(served: ServedCells) -> list[dict]:
    """What each compiled cell asks of the runner's pools; a failed cell puts nothing on the board."""
    needs = []
    for cell, meta_path, export_path in zip(served.cells, served.compile_meta, served.export_meta, strict=True):
        if failure_of(meta_path) is not None:
            continue
        lowered = read_json(meta_path)
        needs.append(
            {
                "cell": cell,
                "pte_bytes": lowered["pte_bytes"],
                "planned_buffer_bytes": lowered["planned_buffer_bytes"],
                "input_bytes": input_bytes(read_json(export_path)),
                "scratch_bytes": lowered["scratch_bytes"],
            }
        )
    return needs


def run_line(firmware_ready: bool, fvp: dict) -> str:
    """One line: why a cell does not run on its FVP, or 'ready'."""
    missing = ([] if firmware_ready else ["no firmware"]) + (
        [] if fvp["ok"] else [f"{fvp['problem']} ({fvp['get_it']})"]
    )
    return "not run: " + "; ".join(missing) if missing else "ready"


def build_executor_runner(plan: str, elf: str, sizes: str) -> dict:
    """Build the configuration's semihosting runner with ExecuTorch's script; record its sizes."""
    planned = read_json(plan)
    command = planned["build_command"]
    print("$ " + " ".join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, text=True)
    print(proc.stdout[-20000:], proc.stderr[-20000:], sep="\n", flush=True)
    output = Path(next(a for a in command if a.startswith("--output=")).split("=", 1)[1])
    built = next(output.rglob("arm_executor_runner"), None)
    if proc.returncode != 0 or built is None:
        said = proc.stdout + proc.stderr
        tail = [machine_line(said)] if machine_line(said) else (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise StageError(
            f"building the runner failed ({proc.returncode}): {(tail or ['no output'])[0]}",
            fault_of_process(proc.returncode, proc.stdout + proc.stderr),
        )
    shutil.copyfile(built, elf)
    found = {key: int(value) for key, value in re.findall(r"executable_(text|data|bss):\s*(\d+)", proc.stdout)}
    write_json(
        sizes,
        {
            "text_bytes": found.get("text"),
            "data_bytes": found.get("data"),
            "bss_bytes": found.get("bss"),
            "pools": planned["pools"],
        },
    )
    return found


def run_on_fvp(target: str, elf: str, program: str, plan: str, run: str, uart: str, timelimit_s: int = 600) -> dict:
    """Run the cell's program on the FVP and parse what the runner printed."""
    fvp = read_json(plan)["fvp_path"]
    command = fvp_command(target, str(Path(elf).resolve()), str(Path(program).resolve()), timelimit_s, fvp=fvp)
    print("$ " + " ".join(command), flush=True)
    started = time.monotonic()
    # past its own --timelimit (host seconds) the FVP stops; past a minute more, subprocess does
    # (TimeoutExpired): either is a time limit, the machine's (retried), not the cell's
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timelimit_s + 60)
    atomic_write_text(uart, proc.stdout + proc.stderr)
    parsed = parse_executor_runner_output(proc.stdout)
    parsed["source"] = "FVP (simulated; NPU cycle-accurate, CPU not)"
    stopped = "CPU time has been exceeded" in proc.stdout  # what the FVP says at its --timelimit
    if not parsed["completed"] and (stopped or (not parsed["errors"] and time.monotonic() - started >= timelimit_s)):
        raise StageError(f"FVP run stopped at its time limit of {timelimit_s} s (see {uart})", Fault.TIME)
    if parsed["errors"] or not parsed["completed"]:
        reason = parsed["errors"][0] if parsed["errors"] else "the runner did not complete"
        cause = fault_of_process(proc.returncode, proc.stdout + proc.stderr)
        raise StageError(f"FVP run failed: {reason} (exit {proc.returncode}; see {uart})", cause)
    if parsed["bundleio"] == "FAIL":
        raise StageError(f"FVP run: BundleIO check FAILED, outputs differ from the reference (see {uart})")
    write_json(run, parsed)
    return parsed
