"""Board profiles: the built-in ones are valid and cite their figures; the fit arithmetic."""

from pathlib import Path

import pytest
import yaml

from ethosweep.matrix.boards import board_from_profile, builtin_board_files, fit
from ethosweep.matrix.expand import ConfigError, build_sweep

REPO = Path(__file__).resolve().parents[1]
ADD = {
    "name": "add",
    "import": "executorch.examples.models.toy_model:AddModule",
    "inputs": [{"shape": [4]}, {"shape": [4]}],
}


def test_builtin_boards_are_the_seeds_and_expand_the_matrix():
    assert set(builtin_board_files()) == {"alif-e8", "imx93", "corstone-300", "corstone-320"}
    sweep = build_sweep({"models": [ADD], "targets": [], "boards": list(builtin_board_files())}, REPO)
    assert {(c.target, c.system_config, c.memory_mode) for c in sweep.cells} == {
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"),  # alif-e8 and corstone-300
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Sram_Only"),  # corstone-300
        ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB"),  # imx93
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Shared_Sram"),  # corstone-320
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only"),
    }
    shared = "add/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"
    assert sweep.cell_boards[shared] == ["alif-e8", "corstone-300"]  # compiled once, checked on both


def test_every_figure_in_a_profile_says_where_it_comes_from():
    for name, path in builtin_board_files().items():
        text = path.read_text()
        for key in ("sram_kib", "flash_kib", "clock_mhz"):
            line = next(row for row in text.splitlines() if key in row)
            commented = "#" in line or "#" in text.split(line)[0].splitlines()[-1]
            assert commented, f"{name}: {key} has no source comment"


def test_unknown_board_and_invalid_profile(tmp_path):
    with pytest.raises(ConfigError, match="boards.0.: unknown board 'stm32'; available: alif-e8, corstone-300"):
        build_sweep({"models": [ADD], "boards": ["stm32"]}, REPO)
    profile = yaml.safe_load((REPO / "boards" / "alif-e8.yaml").read_text())
    profile.update(name="bad-board")
    profile["npu"]["memory_modes"] = ["Dedicated_Sram"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(profile))
    with pytest.raises(ConfigError, match="board 'bad-board' .*: ethos-u55 has no dedicated SRAM"):
        build_sweep({"models": [ADD], "boards": ["bad-board"], "board_files": [str(tmp_path / "bad.yaml")]}, tmp_path)


def board(name: str):
    return board_from_profile(yaml.safe_load((REPO / "boards" / f"{name}.yaml").read_text()), name)


# Real figures from a sweep of torchvision's MobileNetV2 (random weights, int8), recorded from
# results/vela/.../compile.json and results/vela/.../summary.json of these machines' run.
MV2_U85_SRAM_ONLY = {"pte_bytes": 3838112, "planned": 752640, "vela": {"sram_memory_used": 1470.0}}
MV2_U65_DEDICATED_384KB = {
    "pte_bytes": 3498784,
    "planned": 752640,
    "vela": {"sram_memory_used": 375.703125, "dram_memory_used": 3692.484375, "total_npu_encoded_weights": 3286912},
}


def test_mobilenet_v2_sram_only_does_not_fit_corstone_320():
    cell = MV2_U85_SRAM_ONLY
    result = fit(board("corstone-320"), "Sram_Only", cell["pte_bytes"], cell["vela"], cell["planned"])
    need = 3838112 / 1024 + 1470.0  # the whole .pte and the arena in the 4 MiB SRAM; pools in DDR
    assert result.needs_kib["sram"] == pytest.approx(need, abs=0.1)
    assert result.verdict == f"does not fit: SRAM needs {need:.1f} KiB, has 4096 KiB"
    assert result.margins_kib["sram"] == pytest.approx(4096 - need, abs=0.1)
    assert result.needs_kib["dram"] == pytest.approx(752640 / 1024, abs=0.1)  # the runner's pools, in DDR
    # Shared_Sram on the same board keeps the .pte in DDR: it fits.
    assert fit(board("corstone-320"), "Shared_Sram", cell["pte_bytes"], cell["vela"], cell["planned"]).fits


def test_dedicated_sram_puts_model_and_arena_in_dram():
    cell = MV2_U65_DEDICATED_384KB
    result = fit(board("imx93"), "Dedicated_Sram_384KB", cell["pte_bytes"], cell["vela"], cell["planned"])
    assert result.fits
    assert result.needs_kib["sram"] == pytest.approx(375.703125, abs=0.1)  # Vela's cache, within the 384 KiB
    arena = 3692.484375 - 3286912 / 1024  # Vela's DRAM use minus the weights it counts there
    assert result.needs_kib["dram"] == pytest.approx(3498784 / 1024 + arena + 752640 / 1024, abs=0.1)
