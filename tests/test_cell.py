"""A cell is one value: its id, C symbol and Vela version follow from it, and a summary row gives it back."""

from ethosweep.matrix.cell import Cell, cell_id

PARTS = ("mnist", "a16w8", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")


def row_of(cell: Cell, installed: str = "5.1.0") -> dict:
    """A summary row as results/summary.py writes it."""
    model, quant, target, system_config, memory_mode = PARTS
    return {
        "cell": cell.id,
        "model": model,
        "quant": quant,
        "target": target,
        "system_config": system_config,
        "memory_mode": memory_mode,
        "vela_version": cell.vela_version or installed,
    }


def test_a_summary_row_gives_back_the_cell_it_was_written_for():
    for cell in (Cell(*PARTS), Cell(*PARTS, vela_version="4.4.1")):
        again = Cell.of(row_of(cell))
        assert again == cell
        assert (again.id, again.symbol, again.label) == (cell.id, cell.symbol, cell.label)


def test_another_vela_version_is_in_the_id_and_the_symbol_the_installed_one_in_neither():
    installed, other = Cell(*PARTS), Cell(*PARTS, vela_version="4.4.1")
    assert installed.id == "mnist/a16w8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    assert other.id == installed.id + "@vela-4.4.1"
    assert installed.symbol == "mnist_a16w8_ethos_u55_128_ethos_u55_high_end_embedded_shared_sram_pte"
    assert other.symbol == installed.symbol.removesuffix("_pte") + "_vela_4_4_1_pte"
    assert "with Vela 4.4.1" in other.label and "Vela" not in installed.label


def test_an_older_summary_without_a_cell_column_is_read_as_the_installed_velas():
    row = {k: v for k, v in row_of(Cell(*PARTS)).items() if k != "cell"}
    row["quantization"] = row.pop("quant")
    assert cell_id(row) == Cell(*PARTS).id
    assert Cell.of(row).vela_version is None
