"""Stage: the deployment bundle of a cell on a board: the files a user copies to the board.

- bare-metal boards (Alif E8, Corstone FVPs): the C header of the .pte and a CMake snippet
  with the settings ExecuTorch's arm_executor_runner is built with for this cell (NPU
  configuration, system config, memory mode, memory pool sizes from the cell's own figures);
- Linux boards (i.MX 93): the .pte and a script that copies it to the board and runs it with
  the aarch64 executor_runner.
Each bundle has a README.md naming the seed's steps, the fit verdict and where each file goes.
Torch-free.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ethosweep.deploy.c_array import render_header
from ethosweep.matrix.boards import board_from_params, fit
from ethosweep.runtime.integrity import verify
from ethosweep.runtime.io import atomic_write_text, read_json

# Headroom on the pool sizes the runner is built with: the planned sizes are exact for the
# method's tensors, the allocator also keeps bookkeeping structures.
POOL_HEADROOM = 1.25
MIN_POOL_BYTES = 64 * 1024


def _pool(size: float) -> int:
    return max(MIN_POOL_BYTES, int(size * POOL_HEADROOM + 1023) // 1024 * 1024)


def cmake_snippet(board, cell: dict, lowered: dict, vela: dict) -> str:
    scratch = int(float(vela.get("sram_memory_used") or 0) * 1024)
    return "\n".join(
        [
            f"# ethosweep: arm_executor_runner settings for {cell['model']} on {board.name}",
            f"# ({cell['target']} / {cell['system_config']} / {cell['memory_mode']}). Pass with cmake -C or include().",
            f'set(ETHOSU_TARGET_NPU_CONFIG "{cell["target"]}" CACHE STRING "")',
            f'set(SYSTEM_CONFIG "{cell["system_config"]}" CACHE STRING "")',
            f'set(MEMORY_MODE "{cell["memory_mode"]}" CACHE STRING "")',
            "# the runner's method allocator: ExecuTorch's memory plan for this .pte, plus headroom",
            f'set(ET_ARM_BAREMETAL_METHOD_ALLOCATOR_POOL_SIZE "{_pool(lowered["planned_buffer_bytes"])}" CACHE '
            'STRING "")',
            "# the Ethos-U scratch/temp allocator: Vela's SRAM use for this cell, plus headroom",
            f'set(ET_ARM_BAREMETAL_SCRATCH_TEMP_ALLOCATOR_POOL_SIZE "{_pool(scratch)}" CACHE STRING "")',
            'set(ET_PTE_FILE_PATH "${CMAKE_CURRENT_LIST_DIR}/model_pte.h" CACHE FILEPATH "")',
            "",
        ]
    )


def run_script(board, cell: dict) -> str:
    return "\n".join(
        [
            "#!/bin/sh",
            f"# ethosweep: run {cell['model']} on {board.name} ({board.runtime}).",
            "# usage: ./run_on_board.sh <user@board> [path/to/executor_runner]",
            "set -eu",
            'BOARD="${1:?usage: $0 <user@board> [executor_runner]}"',
            'RUNNER="${2:-executor_runner}"',
            'scp "$(dirname "$0")/model.pte" "$RUNNER" "$BOARD:/tmp/"',
            'ssh "$BOARD" "/tmp/$(basename "$RUNNER") --model_path /tmp/model.pte"',
            "",
        ]
    )


def bundle_deployment(
    board: dict, cell: dict, pte: str, meta: str, vela_summary: str, bundle: str, symbol: str
) -> dict:
    """Write the deployment bundle folder of one cell on one board. The program (the .pte, or its C
    header rendered here) goes in only where the cell fits the board: a zoo sweep has thousands of
    board cells, and a header of what cannot run there is gigabytes of nothing."""
    board = board_from_params(board)
    lowered, vela = read_json(meta), read_json(vela_summary)["cell"]
    data = verify(pte, lowered["pte_bytes"], lowered["pte_sha256"], "the vela stage")
    out = Path(bundle)
    out.mkdir(parents=True, exist_ok=True)
    verdict = fit(board, cell["memory_mode"], lowered["pte_bytes"], vela, lowered["planned_buffer_bytes"])
    if board.runtime == "linux-aarch64":
        program = "model.pte"
        if verdict.fits:
            shutil.copyfile(pte, out / program)
        atomic_write_text(out / "run_on_board.sh", run_script(board, cell))
        (out / "run_on_board.sh").chmod(0o755)
        files = {
            "model.pte": "the program; copied to the board",
            "run_on_board.sh": "copies the .pte and the runner, runs it",
        }
        build = (
            "Build the runner for the board: ExecuTorch's `executor_runner` with the Ethos-U delegate, "
            "cross-compiled for aarch64 Linux (Debian: gcc-aarch64-linux-gnu); it drives the NPU "
            "through the Linux Ethos-U driver (/dev/ethosu0)."
        )
    else:
        program = "model_pte.h"
        if verdict.fits:
            atomic_write_text(out / program, render_header(data, symbol, origin=str(pte)))
        atomic_write_text(out / "ethosweep.cmake", cmake_snippet(board, cell, lowered, vela))
        files = {
            "model_pte.h": "the .pte as a C array in section network_model_sec",
            "ethosweep.cmake": "arm_executor_runner build settings for this cell",
        }
        build = (
            "Build ExecuTorch's arm_executor_runner with these settings "
            "(`cmake -C ethosweep.cmake ...` or backends/arm/scripts/build_executor_runner.sh with the same "
            "--target/--system_config/--memory_mode) and link the header into it."
        )
    if not verdict.fits:
        files[program] = f"not written: the cell does not fit {board.name} (its .pte: {pte})"
    readme = _readme(board, cell, verdict, files, build)
    atomic_write_text(out / "README.md", readme)
    return {"fit": verdict.verdict}


def _readme(board, cell: dict, verdict, files: dict[str, str], build: str) -> str:
    """The bundle's README: the cell, its fit with the margins, its files and the steps to the board."""
    return "\n".join(
        [
            f"# {cell['model']} on {board.name}",
            "",
            board.description + ".",
            "",
            f"Compiled for {cell['target']} / {cell['system_config']} / {cell['memory_mode']} "
            f"({cell['quant']}); profile: {board.source}.",
            "",
            f"**Fit: {verdict.verdict}** — " + "; ".join(verdict.counted) + ".",
            "Margins (KiB): " + ", ".join(f"{r} {m:+g}" for r, m in verdict.margins_kib.items()) + ".",
            "",
            "## Files",
            *[f"- `{name}`: {what}" for name, what in files.items()],
            "",
            "## Steps",
            board.steps,
            "",
            build,
            "",
        ]
    )
