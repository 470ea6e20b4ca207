"""A cell: one model compiled for one Ethos-U configuration, as one value from the config to the report.

Its identity (model, scheme, target, system config, memory mode, Vela version) gives everything
that follows from it: its path below each stage's folder (its id), its label in messages, its C
symbol and its TOSA profile. Readers of the summary rebuild a Cell from a row (`Cell.of`) instead
of joining or parsing strings. Torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ethosweep.matrix import targets as tg

# What a cell's id (its path) adds for a Vela version other than the one installed with ExecuTorch.
VELA_TAG = "@vela-"


def symbol_for(*parts: str) -> str:
    """A C identifier from the cell's parts: 'mnist', 'ethos-u55-128', ... -> 'mnist_ethos_u55_128_..._pte'."""
    name = "_".join(re.sub(r"[^0-9A-Za-z]+", "_", p).strip("_").lower() for p in parts)
    if not name or name[0].isdigit():
        name = "m_" + name
    return f"{name}_pte"


@dataclass(frozen=True)
class VelaOptions:
    optimise: str = tg.VELA_DEFAULT_OPTIMISE
    arena_cache_size: int | None = None
    config: str | None = None  # custom vela.ini, None = Vela's built-in Arm/vela.ini
    # what Vela refuses is kept on the CPU and the rest compiled (ethosweep.vela.compile)
    fallback: bool = True

    def as_params(self) -> dict[str, Any]:
        params = {"optimise": self.optimise, "arena_cache_size": self.arena_cache_size, "config": self.config}
        # only when off: a cell with the default keeps the params (and the outputs) it had
        return params if self.fallback else {**params, "fallback": False}


@dataclass(frozen=True)
class Cell:
    model: str
    quant: str
    target: str
    system_config: str
    memory_mode: str
    vela: VelaOptions = VelaOptions()
    # None: the Vela installed with ExecuTorch (uv.lock), run in-process; else another version,
    # run from an environment of its own (ethosweep.vela.environment)
    vela_version: str | None = None

    def __post_init__(self) -> None:
        # a job gets its Vela options as the rule's params give them (VelaOptions.as_params)
        if isinstance(self.vela, dict):
            object.__setattr__(self, "vela", VelaOptions(**self.vela))

    @property
    def vela_tag(self) -> str:
        """'' for the installed Vela, '@vela-<version>' for another: what the cell's path adds, so
        the installed version's cells keep their paths whether or not other versions are swept."""
        return "" if self.vela_version is None else f"{VELA_TAG}{self.vela_version}"

    @property
    def effective_vela_version(self) -> str:
        return self.vela_version or tg.installed_vela_version()

    @property
    def parts(self) -> tuple[str, ...]:
        """The folders of its path: model, scheme, target, system config, memory mode (with the Vela tag)."""
        return (self.model, self.quant, self.target, self.system_config, self.memory_mode + self.vela_tag)

    @property
    def id(self) -> str:
        """The cell's path below each stage's results folder."""
        return "/".join(self.parts)

    @property
    def symbol(self) -> str:
        """The C name of its program in a header: several cells' headers link into one image."""
        return symbol_for(
            self.model, self.quant, self.target, self.system_config, self.memory_mode, *filter(None, [self.vela_tag])
        )

    @classmethod
    def of(cls, record: dict) -> "Cell":
        """The cell a summary row or a cell record describes (its Vela version only if its id has the tag)."""
        tagged = VELA_TAG in cell_id(record)
        return cls(*_identity(record), vela_version=record.get("vela_version") if tagged else None)

    @property
    def tosa_profile(self) -> str:
        return tg.tosa_profile(self.target)

    @property
    def where(self) -> str:
        """'ethos-u55-128 / Shared_Sram' (with the system config where it is not the family's default)."""
        default = self.system_config == tg.DEFAULT_SYSTEM_CONFIG[tg.family(self.target)]
        return f"{self.target} / {self.memory_mode}" + ("" if default else f" ({self.system_config})")

    @property
    def label(self) -> str:
        """How messages name the cell."""
        label = f"{self.model} [{self.quant}] on {self.target} / {self.system_config} / {self.memory_mode}"
        return label + (f" with Vela {self.vela_version}" if self.vela_version else "")


@dataclass(frozen=True)
class CpuCell:
    """A model compiled for a CPU alone (no NPU): ExecuTorch's Cortex-M backend."""

    model: str
    quant: str
    cpu: str

    @property
    def id(self) -> str:
        return f"{self.model}/{self.quant}/{self.cpu}"


def cell_id(record: dict) -> str:
    """A cell's id (Cell.id) from a cell record (key "id") or a summary row (column "cell"; older
    summaries have neither, and no cell of another Vela version)."""
    return record.get("id") or record.get("cell") or Cell(*_identity(record)).id


def _identity(record: dict) -> tuple[str, str, str, str, str]:
    """(model, scheme, target, system config, memory mode) of a cell record or a summary row."""
    quant = record["quant"] if "quant" in record else record["quantization"]
    return record["model"], quant, record["target"], record["system_config"], record["memory_mode"]
