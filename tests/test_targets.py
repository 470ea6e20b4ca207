from pathlib import Path

import pytest

from ethosweep.matrix import targets as tg


def test_every_vela_accelerator_is_a_target_with_its_family_and_peak_macs():
    assert len(tg.TARGETS) == 11
    assert tg.family("ethos-u65-512") == "ethos-u65"
    assert tg.macs_per_cycle("ethos-u85-2048") == 2048
    with pytest.raises(ValueError, match="unknown Ethos-U target 'ethos-u75-256'; allowed: ethos-u55-32"):
        tg.family("ethos-u75-256")


def test_u55_and_u65_share_the_u55_tosa_profile_and_u85_has_its_own():
    assert {tg.tosa_profile(t) for t in tg.TARGETS if "u55" in t or "u65" in t} == {"u55"}
    assert {tg.tosa_profile(t) for t in tg.TARGETS if "u85" in t} == {"u85"}
    assert tg.tosa_spec("u55").endswith("+u55")


def test_builtin_vela_ini_defines_the_documented_system_configs_and_memory_modes():
    ini = tg.read_vela_ini()
    assert set(tg.DEFAULT_SYSTEM_CONFIG.values()) <= set(ini.system_configs)
    assert {"Sram_Only", "Shared_Sram", "Dedicated_Sram", "Dedicated_Sram_384KB"} <= set(ini.memory_modes)
    assert ini.axi1_port("Ethos_U65_High_End") == "Dram"
    # Dedicated_Sram_384KB inherits its arena placement from Dedicated_Sram.
    assert ini.memory_mode_setting("Dedicated_Sram_384KB", "arena_mem_area") == "Axi1"
    assert ini.memory_mode_setting("Dedicated_Sram_384KB", "arena_cache_size") == "393216"


@pytest.mark.parametrize(
    "target, system_config, memory_mode, expected",
    [
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", None),
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Sram_Only", None),
        ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Dedicated_Sram", "ethos-u55 has no dedicated SRAM"),
        ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_512KB", None),
        # Vela rejects an arena on a flash port: "Invalid configuration of arena_mem_area=OffChipFlash"
        ("ethos-u65-256", "Ethos_U65_Embedded", "Dedicated_Sram", "puts the arena on AXI1, which is OffChipFlash"),
        ("ethos-u85-256", "Ethos_U85_SYS_Flash_High", "Dedicated_Sram", "which is OffChipFlash"),
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram", None),
        ("ethos-u85-256", "Ethos_U55_High_End_Embedded", "Shared_Sram", "is for another NPU family than ethos-u85-256"),
        ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Everywhere", "memory mode 'Sram_Everywhere' is not defined"),
    ],
)
def test_invalid_combinations_are_explained(target, system_config, memory_mode, expected):
    reason = tg.invalid_combination_reason(target, system_config, memory_mode, tg.read_vela_ini())
    if expected is None:
        assert reason is None
    else:
        assert expected in reason


def test_a_custom_vela_ini_is_read_with_its_own_names(tmp_path: Path):
    ini = tmp_path / "my_vela.ini"
    ini.write_text(
        "[System_Config.My_Board]\ncore_clock=400e6\naxi0_port=Sram\naxi1_port=Dram\n"
        "[Memory_Mode.My_Mode]\nconst_mem_area=Axi1\narena_mem_area=Axi0\ncache_mem_area=Axi0\n"
    )
    parsed = tg.read_vela_ini(str(ini))
    assert list(parsed.system_configs) == ["My_Board"]
    assert tg.invalid_combination_reason("ethos-u55-64", "My_Board", "My_Mode", parsed) is None
