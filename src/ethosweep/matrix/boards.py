"""Board profiles and the fit check: does a compiled cell fit the board's memories?

A board profile (boards/*.yaml, schema workflow/schemas/board.schema.yaml) names the NPU
configuration a board compiles for and the sizes of its SRAM, flash/MRAM and DRAM, with
the source of every figure. The fit check places a cell's memory on the board:

- the model (the whole .pte: program, command streams, weights) lives in SRAM for
  Sram_Only, in DRAM for the dedicated-SRAM modes, and otherwise where the board keeps
  models (`placement.model`: flash/MRAM on an MCU, DRAM on Corstone's default link and Linux);
- the NPU's working memory is Vela's figure: its SRAM use (the tensor arena, or in a
  dedicated-SRAM mode the cache), plus in dedicated-SRAM modes the arena Vela puts in DRAM
  (Vela's DRAM use minus the weights it counts there);
- the runner's planned buffers (ExecuTorch's memory plan for tensors outside the delegate:
  inputs, outputs, CPU operators) go where the board's runner keeps its pools.

The runner's own code is not counted unless the firmware stage has measured it.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

REGIONS = ("sram", "flash", "dram")


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    target: str
    system_config: str
    memory_modes: tuple[str, ...]
    npu_clock_mhz: float
    cpu: str
    cpu_clock_mhz: float
    sizes_kib: dict  # region -> KiB
    model_region: str
    pools_region: str
    runtime: str
    simulator: str | None
    steps: str
    source: str  # the profile file

    def as_params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "system_config": self.system_config,
            "memory_modes": list(self.memory_modes),
            "npu_clock_mhz": self.npu_clock_mhz,
            "cpu": self.cpu,
            "sizes_kib": dict(self.sizes_kib),
            "model_region": self.model_region,
            "pools_region": self.pools_region,
            "runtime": self.runtime,
            "simulator": self.simulator,
            "description": self.description,
            "steps": self.steps,
            "source": self.source,
        }


def builtin_board_files(boards_dir: Path | None = None) -> dict[str, Path]:
    """The profiles in the repository's boards/ folder, by name."""
    boards_dir = boards_dir or Path(__file__).resolve().parents[3] / "boards"
    return {p.stem: p for p in sorted(boards_dir.glob("*.yaml"))}


def load_board_file(path: Path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def board_from_profile(profile: dict, source: str) -> Board:
    npu, memory, placement = profile["npu"], profile["memory"], profile["placement"]
    return Board(
        name=profile["name"],
        description=profile["description"],
        target=npu["target"],
        system_config=npu["system_config"],
        memory_modes=tuple(npu["memory_modes"]),
        npu_clock_mhz=float(npu["clock_mhz"]),
        cpu=profile["cpu"]["core"],
        cpu_clock_mhz=float(profile["cpu"]["clock_mhz"]),
        sizes_kib={"sram": memory["sram_kib"], "flash": memory["flash_kib"], "dram": memory["dram_kib"]},
        model_region=placement["model"],
        pools_region=placement["runner_pools"],
        runtime=profile["runtime"],
        simulator=profile.get("simulator"),
        steps=profile.get("steps", "").strip(),
        source=source,
    )


# what params written before these fields existed lack (and as_params leaves out the CPU's clock)
_OPTIONAL = {"cpu_clock_mhz": 0.0, "simulator": None, "steps": "", "source": ""}


def board_from_params(params: dict) -> Board:
    """The board a rule's params describe (Board.as_params)."""
    values = {
        f.name: params.get(f.name, _OPTIONAL[f.name]) if f.name in _OPTIONAL else params[f.name] for f in fields(Board)
    }
    return Board(**dict(values, memory_modes=tuple(values["memory_modes"]), sizes_kib=dict(values["sizes_kib"])))


@dataclass(frozen=True)
class Fit:
    needs_kib: dict  # region -> KiB needed
    sizes_kib: dict  # region -> KiB available
    counted: tuple[str, ...]  # what was counted, in words

    @property
    def margins_kib(self) -> dict:
        return {r: round(self.sizes_kib[r] - self.needs_kib[r], 1) for r in REGIONS if self.needs_kib[r] > 0}

    @property
    def fits(self) -> bool:
        return all(m >= 0 for m in self.margins_kib.values())

    @property
    def verdict(self) -> str:
        short = [r for r, m in self.margins_kib.items() if m < 0]
        if not short:
            return "fits"
        return "does not fit: " + "; ".join(
            f"{_region_name(r)} needs {self.needs_kib[r]:.1f} KiB, has {self.sizes_kib[r]:g} KiB" for r in short
        )


def _region_name(region: str) -> str:
    return {"sram": "SRAM", "flash": "flash/MRAM", "dram": "DRAM"}[region]


def fit(
    board: Board, memory_mode: str, pte_bytes: int, vela: dict, planned_bytes: int, runner_code_bytes: int | None = None
) -> Fit:
    """Place a cell's memory on a board (see the module docstring)."""
    needs = {r: 0.0 for r in REGIONS}
    counted = []
    dedicated = memory_mode.startswith("Dedicated_Sram")
    model_region = "sram" if memory_mode == "Sram_Only" else ("dram" if dedicated else board.model_region)
    needs[model_region] += pte_bytes / 1024
    counted.append(f".pte {pte_bytes / 1024:.1f} KiB in {_region_name(model_region)}")
    sram = float(vela.get("sram_memory_used") or 0)
    needs["sram"] += sram
    counted.append(f"Vela's SRAM use {sram:.1f} KiB")
    if dedicated:
        weights_kib = float(vela.get("total_npu_encoded_weights") or 0) / 1024
        arena = max(0.0, float(vela.get("dram_memory_used") or 0) - weights_kib)
        needs["dram"] += arena
        counted.append(f"Vela's DRAM arena {arena:.1f} KiB")
    needs[board.pools_region] += planned_bytes / 1024
    counted.append(f"runner's planned buffers {planned_bytes / 1024:.1f} KiB in {_region_name(board.pools_region)}")
    if runner_code_bytes is not None:
        code_region = "flash" if board.sizes_kib["flash"] else "dram"
        needs[code_region] += runner_code_bytes / 1024
        counted.append(f"runner code {runner_code_bytes / 1024:.1f} KiB")
    else:
        counted.append("runner code not counted (firmware not built)")
    return Fit({r: round(v, 1) for r, v in needs.items()}, dict(board.sizes_kib), tuple(counted))
