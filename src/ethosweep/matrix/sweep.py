"""The matrix, expanded: its cells (ethosweep.matrix.expand builds it from a config), looked up by
identity, and described in a line for the terminal.

Torch-free: the Snakefile builds the matrix at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ethosweep.matrix.cell import Cell, CpuCell
from ethosweep.matrix.models import ModelSpec


@dataclass
class Sweep:
    models: dict[str, ModelSpec]
    quantization: tuple[str, ...]
    cells: list[Cell]
    seed: int
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (combination, reason)
    numerics: dict = field(default_factory=dict)
    boards: dict = field(default_factory=dict)  # name -> boards.Board
    cell_boards: dict = field(default_factory=dict)  # cell id -> [board names]
    cpu_cells: list[CpuCell] = field(default_factory=list)
    only_for_boards: list[str] = field(default_factory=list)  # ids of the cells only the boards add
    _by_id: dict = field(default_factory=dict, repr=False)
    _indexes: dict = field(default_factory=dict, repr=False)  # fields -> their values -> cells

    def board_cells(self) -> list[tuple[str, Cell]]:
        """(board, cell) for every cell compiled for a board, in matrix order."""
        return [(b, c) for c in self.cells for b in self.cell_boards.get(c.id, [])]

    def cells_of(self, **match: str) -> list[Cell]:
        """The cells with these fields' values (model=..., tosa_profile=...), in matrix order. Each set
        of fields is indexed once: Snakemake asks once per job it plans, thousands of times in a zoo."""
        fields = tuple(sorted(match))
        index = self._indexes.get(fields)
        if index is None or sum(map(len, index.values())) != len(self.cells):
            index = {}
            for c in self.cells:
                index.setdefault(tuple(getattr(c, f) for f in fields), []).append(c)
            self._indexes[fields] = index
        return list(index.get(tuple(match[f] for f in fields), []))

    def cell(self, model, quant, target, system_config, memory_mode, vela_tag="") -> Cell:
        key = Cell(model, quant, target, system_config, memory_mode).id + vela_tag
        if len(self._by_id) != len(self.cells):
            self._by_id.update({c.id: c for c in self.cells})
        try:
            return self._by_id[key]
        except KeyError:
            raise KeyError(f"no cell {key} in the matrix") from None

    def other_vela_versions(self) -> list[str]:
        """The Vela versions cells run from environments of their own (not the installed one)."""
        return sorted({c.vela_version for c in self.cells if c.vela_version}, key=version_key)

    def vela_versions(self) -> list[str]:
        """Every Vela version the matrix sweeps, the installed one included if any cell uses it."""
        return sorted({c.effective_vela_version for c in self.cells}, key=version_key)

    def quantize_keys(self) -> list[tuple[str, str, str]]:
        """(model, quant, tosa profile) combinations the cells need, in matrix order."""
        return list(dict.fromkeys((c.model, c.quant, c.tosa_profile) for c in self.cells))

    def describe(self) -> str:
        """One line for the terminal: what is about to be swept."""
        dims = (
            (len({c.model for c in self.cells}), "model"),
            (len({(c.target, c.system_config) for c in self.cells}), "target"),
            (len({c.memory_mode for c in self.cells}), "memory mode"),
            (len({c.quant for c in self.cells}), "quantization scheme"),
        )
        if len(self.vela_versions()) > 1:
            dims += ((len(self.vela_versions()), "Vela version"),)
        text = (
            f"ethosweep: {len(self.cells)} cells ("
            + ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for n, k in dims)
            + ")"
        )
        if self.only_for_boards:
            adding = [b for b in self.boards if any(b in self.cell_boards[i] for i in self.only_for_boards)]
            text += (
                f"; {len(self.only_for_boards)} of them for the NPU configuration or memory mode of a board "
                f"({', '.join(adding)}: `boards`)"
            )
        if self.skipped:
            reasons = sorted({r for _, r in self.skipped})
            n = len(self.skipped)
            shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if reasons[3:] else "")
            text += f"; left out {n} combination{'s' if n != 1 else ''} Vela does not accept: {shown}"
        return text


def version_key(version: str) -> tuple:
    """A release number's sort key: 3.12.0 before 4.0.0."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
