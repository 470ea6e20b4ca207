"""The ExecuTorch Ethos-U compile spec of a cell, and the Vela flags behind it.

The quantize and lower stages use a TOSA profile's representative compile spec (they
only read its TOSA specification); the vela stage compiles each cell with its own
compile spec's Vela flags and records its compile specs in the cell's .pte, exactly
as aot_arm_compiler would for that cell.
"""

from __future__ import annotations

import functools

from ethosweep.matrix import targets as tg
from ethosweep.matrix.cell import Cell

# aot_arm_compiler passes these to Vela; they only add console output, but
# they are serialised into the .pte's compile specs, so passing the same ones
# keeps ethosweep's .pte byte-identical to aot_arm_compiler's for the same cell.
AOT_EXTRA_FLAGS = ("--verbose-operators", "--verbose-cycle-estimate")

# A representative target per TOSA profile for the quantizer, which reads only
# the compile spec's TOSA specification (see quantize.py and its test).
PROFILE_TARGET = {"u55": "ethos-u55-128", "u85": "ethos-u85-256"}


def vela_option_flags(vela: dict) -> list[str]:
    """Vela flags for the cell's options beyond target, system config and memory mode.

    Flags equal to Vela's defaults are left out: they would change nothing but
    the .pte's recorded compile specs (and its bytes).
    """
    flags = []
    if vela.get("optimise", tg.VELA_DEFAULT_OPTIMISE) != tg.VELA_DEFAULT_OPTIMISE:
        flags.append(f"--optimise={vela['optimise']}")
    if vela.get("arena_cache_size") is not None:
        flags.append(f"--arena-cache-size={int(vela['arena_cache_size'])}")
    return flags


def config_ini(vela: dict) -> str:
    """The --config value for Vela. Vela reads a relative path of exactly two parts
    ('Arm/vela.ini') as a file of its own config_files folder, so a user's
    'config/vela.ini' gets a leading './' to be read from the working directory."""
    path = vela.get("config")
    if not path:
        return tg.DEFAULT_VELA_INI
    parts = path.split("/")
    return f"./{path}" if len(parts) == 2 and not path.startswith((".", "~", "/")) else path


def ethosu_compile_spec(target: str, system_config: str, memory_mode: str, vela: dict):
    """The EthosUCompileSpec that aot_arm_compiler would build for this cell."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    spec = EthosUCompileSpec(
        target,
        system_config=system_config,
        memory_mode=memory_mode,
        extra_flags=[*AOT_EXTRA_FLAGS, *vela_option_flags(vela)],
        config_ini=config_ini(vela),
    )
    # aot_arm_compiler quantizes and lowers with one compile spec object, and its
    # quantizer materialises the (lazily created, target-dependent) pass-pipeline
    # config, which the .pte then records. Materialising it here keeps the two
    # byte-identical; lowering itself uses the same default either way.
    spec._get_pass_pipeline_config()
    return spec


def profile_compile_spec(profile: str):
    """A compile spec with the given TOSA profile: all the quantizer and the lowering read from it
    (tests/test_quantize.py and tests/test_compile_once.py check that claim)."""
    target = PROFILE_TARGET[profile]
    return ethosu_compile_spec(target, tg.DEFAULT_SYSTEM_CONFIG[tg.family(target)], "Shared_Sram", {})


@functools.lru_cache(maxsize=16)
def cell_compile_spec(cell: Cell):
    """The cell's EthosUCompileSpec, built once per process: its Vela flags and the compile specs its
    .pte records are both read from it."""
    return ethosu_compile_spec(cell.target, cell.system_config, cell.memory_mode, cell.vela.as_params())


def cell_compile_specs(cell: Cell) -> list[tuple[str, bytes]]:
    """The compile specs ExecuTorch records in each delegate of the cell's .pte, as (key, value)."""
    return [(spec.key, bytes(spec.value)) for spec in cell_compile_spec(cell)._to_list()]


def vela_flags(cell: Cell) -> list[str]:
    """The flags EthosUBackend hands to Vela for this cell (its compile spec's compiler flags)."""
    return list(cell_compile_spec(cell).compiler_flags)
