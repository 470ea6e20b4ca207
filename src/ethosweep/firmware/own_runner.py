"""ethosweep's own runner: ExecuTorch built once per CPU, one runner ELF per cell (CPU-only and NPU cells).

Arm's core_platform (the FVP boards' startup code and drivers) is not public on GitHub and the
FVPs are Arm downloads, so CPU-only cells use ethosweep's own pieces: firmware/runner (ExecuTorch's
runtime with the kernels the .pte names, files and stdout over semihosting) on
firmware/platform/mps3-an547 (vector table, reset, linker script), run by Debian's
`qemu-system-arm -M mps3-an547` (Cortex-M55 with MVE, no NPU). QEMU is not cycle-accurate: a run
here is a functional check of the firmware (it loads, runs, gives the right numbers), never a timing.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ethosweep.firmware.build_tools import build_tool
from ethosweep.matrix.targets import CPU_BOARD
from ethosweep.runtime.errors import StageError, fault_of_process
from ethosweep.runtime.io import atomic_write_bytes, write_json

REPO = Path(__file__).resolve().parents[3]
RUNNER_SOURCE = REPO / "firmware" / "runner"
# The DDR window the linker script gives the runner (firmware/platform/mps3-an547; the vectors sit in ITCM).
DDR_BYTES = 256 * 1024 * 1024
POOL_HEADROOM = 64 * 1024  # runtime state (method, values, kernels' argument lists) beyond the planned buffers


def toolchain_file(executorch_src: str | Path) -> Path:
    return Path(executorch_src) / "examples/arm/ethos-u-setup/arm-none-eabi-gcc.cmake"


def executorch_configure_command(
    executorch_src, cpu: str, build_dir, install_dir, python: str, cmsis_nn: str | None = None
) -> list[str]:
    """Configure ExecuTorch's bare-metal libraries for one CPU: its arm-baremetal preset without the
    Ethos-U delegate (which needs core_driver), with the Cortex-M (CMSIS-NN) and quantized kernels."""
    command = [
        build_tool("cmake"),
        "-S",
        str(executorch_src),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={build_tool('ninja')}",
        "--preset",
        "arm-baremetal",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DTARGET_CPU={cpu}",
        "-DEXECUTORCH_BUILD_ARM_BAREMETAL=OFF",
        "-DEXECUTORCH_BUILD_DEVTOOLS=OFF",
        "-DEXECUTORCH_BUILD_PTHREADPOOL=OFF",
        "-DEXECUTORCH_BUILD_CPUINFO=OFF",
        "-DEXECUTORCH_BAREMETAL_SKIP_INSTALL=OFF",
        f"-DCMAKE_INSTALL_PREFIX={install_dir}",
        f"-DPYTHON_EXECUTABLE={python}",
    ]
    if cmsis_nn:
        command += [f"-DCMSIS_NN_LOCAL_PATH={cmsis_nn}", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"]
    return command


def runner_configure_command(
    executorch_src, install_dir, pte, build_dir, python: str, method_pool: int, temp_pool: int, npu: dict | None = None
) -> list[str]:
    """`npu`: {target, driver, cmsis} to link ExecuTorch's Ethos-U delegate and the core driver."""
    npu_flags = (
        [
            f"-DETHOSWEEP_NPU={npu['target']}",
            f"-DETHOSWEEP_ETHOSU_DRIVER={npu['driver']}",
            f"-DETHOSWEEP_CMSIS={npu['cmsis']}",
        ]
        if npu
        else []
    )
    return [
        build_tool("cmake"),
        "-S",
        str(RUNNER_SOURCE),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={build_tool('ninja')}",
        f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file(executorch_src)}",
        "-DSEMIHOSTING=ON",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DEXECUTORCH_ROOT={executorch_src}",
        f"-DEXECUTORCH_INSTALL={install_dir}",
        f"-DETHOSWEEP_PTE={pte}",
        f"-DETHOSWEEP_BOARD={CPU_BOARD}",
        f"-DPYTHON_EXECUTABLE={python}",
        f"-DETHOSWEEP_METHOD_POOL_BYTES={method_pool}",
        f"-DETHOSWEEP_TEMP_POOL_BYTES={temp_pool}",
    ] + npu_flags


def pool_sizes(planned_bytes: int) -> tuple[int, int]:
    """(method pool, temp pool): the planned buffers plus headroom; CMSIS-NN scratch in the temp pool."""
    method = _round_up(planned_bytes + POOL_HEADROOM, 1024)
    return method, 256 * 1024


def _round_up(value: int, step: int) -> int:
    return (value + step - 1) // step * step


def run_logged(command: list[str], log) -> None:
    """Run a build step with its output in the job's log; a failure names the step."""
    log.write(f"$ {' '.join(map(str, command))}\n")
    log.flush()
    result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        log.flush()
        said = Path(log.name).read_text(errors="replace")[-65536:] if hasattr(log, "name") else ""
        raise StageError(
            f"`{' '.join(map(str, command[:3]))} ...` failed (exit {result.returncode}); see the log",
            fault_of_process(result.returncode, said),
        )


def build_executorch(
    executorch_src,
    cpu: str,
    install_dir,
    meta,
    log,
    threads: int = 2,
    cmsis_nn: str | None = None,
    python: str | None = None,
) -> dict:
    """The ExecuTorch job: configure, build and install the bare-metal libraries for one CPU.
    The build folder sits next to the install folder, so a rerun is incremental."""
    jobs = threads  # the workflow's name (runtime.binding)

    started = time.monotonic()
    build_dir = Path(install_dir).parent / "build"
    with open(log, "a") as log_file:
        run_logged(
            executorch_configure_command(
                executorch_src, cpu, build_dir, install_dir, python or sys.executable, cmsis_nn
            ),
            log_file,
        )
        run_logged(
            [build_tool("cmake"), "--build", str(build_dir), "--parallel", str(jobs), "--target", "install"], log_file
        )
    libraries = sorted(p.name for p in (Path(install_dir) / "lib").glob("*.a"))
    record = {
        "cpu": cpu,
        "executorch_src": str(executorch_src),
        "install_dir": str(install_dir),
        "libraries": libraries,
        "seconds": round(time.monotonic() - started, 1),
    }
    write_json(meta, record)
    return record


def elf_sizes(elf, size_tool: str = "arm-none-eabi-size") -> dict[str, int]:
    """The ELF's loaded sections summed as text/data/bss, plus the heap and stack the linker
    script reserves (kept apart: `size`'s Berkeley format would count them as bss)."""
    out = subprocess.run([size_tool, "-A", str(elf)], capture_output=True, text=True, check=True).stdout
    return parse_section_sizes(out)


def parse_section_sizes(text: str) -> dict[str, int]:
    sizes = {"text": 0, "data": 0, "bss": 0, "heap": 0, "stack": 0}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or not fields[1].isdigit() or not fields[0].startswith("."):
            continue
        name, size, address = fields[0], int(fields[1]), int(fields[2])
        if address == 0 and name != ".vectors":
            continue  # not loaded: debug info, comments, attributes
        key = {
            ".bss": "bss",
            ".heap": "heap",
            ".stack": "stack",
            ".data": "data",
            ".got": "data",
            ".got.plt": "data",
        }.get(name, "text")
        sizes[key] += size
    return sizes


def memory_fit(sizes: dict[str, int], pte_bytes: int) -> dict:
    """Does the runner (its pools are in bss) plus the .pte it loads into the heap fit the board?"""
    image = sizes["text"] + sizes["data"] + sizes["bss"]
    needed = image + pte_bytes + sizes["stack"]
    ddr = DDR_BYTES
    fits = pte_bytes <= sizes["heap"] and image + sizes["heap"] + sizes["stack"] <= ddr
    return {
        "board": CPU_BOARD,
        "image_bytes": image,
        "needed_bytes": needed,
        "ddr_bytes": ddr,
        "pte_bytes": pte_bytes,
        "heap_bytes": sizes["heap"],
        "fits": fits,
        "line": (
            f"fits: code {sizes['text'] / 1024:.1f} KiB, data+bss (pools) "
            f"{(sizes['data'] + sizes['bss']) / 1024:.1f} KiB, "
            f".pte {pte_bytes / 1024:.1f} KiB in a {sizes['heap'] // 1024 // 1024} MiB heap; "
            f"{ddr // 1024 // 1024} MiB DDR window"
        )
        if fits
        else f"does not fit: .pte {pte_bytes} B in a {sizes['heap']} B heap, image {image} B in {ddr} B DDR",
    }


@dataclass(frozen=True)
class ExecuTorchBuild:
    """ExecuTorch's source checkout and its bare-metal libraries built for a CPU (the executorch job)."""

    executorch_src: str
    install_dir: str


@dataclass(frozen=True)
class NpuLink:
    """What an Ethos-U cell's runner links beside the CPU runner: ExecuTorch's delegate for this NPU
    and Arm's core driver, with CMSIS."""

    target: str
    driver: str
    cmsis: str


@dataclass(frozen=True)
class RunnerFiles:
    """What a runner job writes: the ELF, its facts (firmware.json) and its log."""

    elf: str
    firmware: str
    log: str


def build_runner(
    executorch: ExecuTorchBuild, pte, pools: tuple[int, int], build_dir, elf_out, log, npu: NpuLink | None = None
) -> dict:
    """Configure and build the runner for one .pte with these (method, temp) pools; copy its ELF to
    `elf_out`."""
    method_pool, temp_pool = pools
    command = runner_configure_command(
        executorch.executorch_src,
        executorch.install_dir,
        Path(pte).resolve(),
        build_dir,
        sys.executable,
        method_pool,
        temp_pool,
        asdict(npu) if npu else None,
    )
    run_logged(command, log)
    run_logged([build_tool("cmake"), "--build", str(build_dir)], log)
    built = Path(build_dir) / "ethosweep_runner.elf"
    atomic_write_bytes(elf_out, built.read_bytes())
    sizes = elf_sizes(elf_out)
    selected = {
        lib: _registered_kernels(Path(build_dir) / f"ethosweep_{lib}_ops")
        for lib in ("portable", "quantized", "cortex_m")
    }
    if npu:
        selected["ethos_u"] = ["EthosUBackend (delegate)", f"ethosu_core_driver ({npu.target})"]
    return {
        "board": CPU_BOARD,
        "elf_bytes": Path(elf_out).stat().st_size,
        **sizes,
        "method_pool_bytes": method_pool,
        "temp_pool_bytes": temp_pool,
        "kernels": selected,
        "fit": memory_fit(sizes, Path(pte).stat().st_size),
    }


def build_cell_runner(executorch: ExecuTorchBuild, pte, lower_meta, files: RunnerFiles) -> dict:
    """The runner job of one CPU-only cell."""
    from ethosweep.runtime.io import read_json

    return _build_recorded(executorch, pte, pool_sizes(read_json(lower_meta)["planned_bytes"]), files)


def build_npu_cell_runner(
    executorch: ExecuTorchBuild, pte, compile_meta, plan, cell, npu: NpuLink, files: RunnerFiles
) -> dict:
    """ethosweep's runner for one Ethos-U cell: the CPU runner plus ExecuTorch's Ethos-U delegate
    and the core driver, on the Corstone-300 memory map. It links and its memory fit is checked;
    it runs only on the Corstone-300 FVP or hardware (QEMU models no NPU)."""
    from ethosweep.runtime.io import read_json

    needs = next(c for c in read_json(plan)["cells"] if c["cell"] == cell)
    planned = read_json(compile_meta)["planned_buffer_bytes"] + needs["input_bytes"]
    # the temp pool holds the Ethos-U scratch, read from the .pte by the firmware plan
    pools = (pool_sizes(planned)[0], _round_up(max(needs["scratch_bytes"], 1), 16 * 1024))
    facts = {
        "npu": npu.target,
        "npu_base": "0x48102000 (Corstone-300), IRQ 56",
        "run": "not run: QEMU models no NPU; the Corstone-300 FVP is an Arm download",
    }
    return _build_recorded(executorch, pte, pools, files, npu, facts)


def _build_recorded(
    executorch: ExecuTorchBuild,
    pte,
    pools: tuple[int, int],
    files: RunnerFiles,
    npu: NpuLink | None = None,
    facts: dict | None = None,
) -> dict:
    """Build a runner in a scratch folder, keep the ELF and its facts (with the tool versions);
    a runner that does not fit fails its job (Snakemake then removes the outputs)."""

    from ethosweep.runtime.provenance import tool_versions

    with tempfile.TemporaryDirectory(prefix="ethosweep-runner-") as build_dir, open(files.log, "a") as log_file:
        record = build_runner(executorch, pte, pools, build_dir, files.elf, log_file, npu)
    record.update(facts or {}, versions=tool_versions())
    write_json(files.firmware, record)
    if not record["fit"]["fits"]:
        raise StageError(f"the runner {record['fit']['line']}")
    return record


def _registered_kernels(codegen_dir: Path) -> list[str]:
    """The operators a generated registration library registers (ExecuTorch's codegen output)."""
    source = codegen_dir / "RegisterCodegenUnboxedKernelsEverything.cpp"
    if not source.is_file():
        return []
    return sorted(set(re.findall(r'"([a-z_]+::[A-Za-z0-9_.]+)"', source.read_text())))
