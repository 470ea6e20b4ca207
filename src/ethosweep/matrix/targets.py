"""Facts about Ethos-U accelerators and Vela configurations.

Torch-free on purpose: the Snakefile imports this while it parses, and every
`snakemake` invocation (including a no-op run) pays for what it imports.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The accelerator configurations Vela 5.1 accepts (`vela --help`).
TARGETS = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)

# CPU-only targets (ExecuTorch's Cortex-M backend, no NPU) and the schemes its quantizer has.
CPU_TARGETS = ("cortex-m55",)
CPU_SCHEMES = ("int8",)

# The NPU families whose subsystem ethosweep's platform layer covers: AN547 is the FPGA image of
# Corstone-300 (Ethos-U55; its FVP also has an Ethos-U65). Ethos-U85 sits in Corstone-320.
NPU_RUNNER_FAMILIES = ("ethos-u55", "ethos-u65")


def npu_runner_state(target: str, sdk_line: str) -> str:
    """Why a cell gets no ethosweep NPU runner here, or 'ready'."""
    if not target.startswith(NPU_RUNNER_FAMILIES):
        return (
            "not built: ethosweep's platform layer is Corstone-300's (mps3-an547); "
            "Ethos-U85 runs on Corstone-320, which needs Arm's core_platform"
        )
    return sdk_line


# System config per family when the config names none; ExecuTorch's own
# defaults (EthosUCompileSpec) for each family.
DEFAULT_SYSTEM_CONFIG = {
    "ethos-u55": "Ethos_U55_High_End_Embedded",
    "ethos-u65": "Ethos_U65_High_End",
    "ethos-u85": "Ethos_U85_SYS_DRAM_Mid",
}

# Vela's built-in configuration file, as ExecuTorch names it.
DEFAULT_VELA_INI = "Arm/vela.ini"

# Vela's default for --optimise; see vela_flags() for why it is not repeated.
VELA_DEFAULT_OPTIMISE = "Performance"

_TARGET_RE = re.compile(r"^(ethos-u(?:55|65|85))-(\d+)$")


def family(target: str) -> str:
    """'ethos-u55-128' -> 'ethos-u55'."""
    return _parse_target(target)[0]


def macs_per_cycle(target: str) -> int:
    """Peak 8x8-bit MACs per cycle: the number in the configuration's name."""
    return _parse_target(target)[1]


@lru_cache(maxsize=64)  # asked for every cell's TOSA profile, millions of times in a zoo's plan
def _parse_target(target: str) -> tuple[str, int]:
    match = _TARGET_RE.match(target)
    if match is None or target not in TARGETS:
        raise ValueError(f"unknown Ethos-U target {target!r}; allowed: {', '.join(TARGETS)}")
    return match.group(1), int(match.group(2))


def tosa_profile(target: str) -> str:
    """The TOSA specification a target lowers to, as a short key.

    ExecuTorch compiles Ethos-U55 *and* Ethos-U65 to the restricted U55 TOSA
    subset ("TOSA-1.0+INT+int16+int4+u55") and Ethos-U85 to the full integer
    profile with control flow ("...+cf"). The quantizer sees only this, so
    quantized programs are shared by all targets with the same profile.
    """
    return "u85" if family(target) == "ethos-u85" else "u55"


def tosa_spec(profile: str) -> str:
    """The full TOSA specification string behind a tosa_profile() key."""
    return {"u55": "TOSA-1.0+INT+int16+int4+u55", "u85": "TOSA-1.0+INT+int16+int4+cf"}[profile]


@dataclass(frozen=True)
class VelaIni:
    """The system configs and memory modes a Vela .ini file defines."""

    path: str
    system_configs: dict[str, dict[str, str]]
    memory_modes: dict[str, dict[str, str]]

    def axi1_port(self, system_config: str) -> str:
        return self.system_configs[system_config].get("axi1_port", "")

    def memory_mode_setting(self, memory_mode: str, key: str) -> str | None:
        """A memory-mode setting, following Vela's `inherit=` chains."""
        seen = set()
        while memory_mode not in seen:
            seen.add(memory_mode)
            section = self.memory_modes.get(memory_mode, {})
            if key in section:
                return section[key]
            parent = section.get("inherit", "")
            if not parent.startswith("Memory_Mode."):
                return None
            memory_mode = parent.removeprefix("Memory_Mode.")
        return None


@lru_cache(maxsize=1)
def installed_vela_version() -> str:
    """The ethos-u-vela installed beside ExecuTorch (uv.lock pins it): the Vela that cells run
    in-process. Any other version a config sweeps runs in an environment of its own."""
    from importlib import metadata

    try:
        return metadata.version("ethos-u-vela")
    except metadata.PackageNotFoundError:
        return "not installed"


def builtin_vela_ini_path() -> Path:
    """Where the installed Vela keeps Arm/vela.ini (found without importing Vela)."""
    spec = importlib.util.find_spec("ethosu")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the ethos-u-vela package is not installed (run `uv sync`)")
    return Path(next(iter(spec.submodule_search_locations))) / "config_files" / "Arm" / "vela.ini"


@lru_cache(maxsize=None)
def read_vela_ini(path: str | None = None) -> VelaIni:
    """Parse a Vela configuration file; None means Vela's built-in Arm/vela.ini."""
    ini_path = builtin_vela_ini_path() if path is None else Path(path)
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",))
    parser.optionxform = str  # Vela's keys are case-sensitive
    if not parser.read(ini_path):
        raise FileNotFoundError(f"Vela configuration file not found: {ini_path}")
    systems, modes = {}, {}
    for section in parser.sections():
        kind, _, name = section.partition(".")
        if kind == "System_Config":
            systems[name] = dict(parser[section])
        elif kind == "Memory_Mode":
            modes[name] = dict(parser[section])
    return VelaIni(str(path or DEFAULT_VELA_INI), systems, modes)


def is_dedicated_sram(memory_mode: str) -> bool:
    return memory_mode.startswith("Dedicated_Sram")


def system_config_reason(target: str, system_config: str, ini: VelaIni) -> str | None:
    """Why this system config cannot be used for this target, or None.

    Built-in system configs are named for their NPU family and only make sense
    with it (ExecuTorch's runner is built per family); Vela itself would
    accept them, so this is ethosweep's rule, stated as such.
    """
    if system_config not in ini.system_configs:
        return f"system config {system_config!r} is not defined in {ini.path}; defined: {', '.join(ini.system_configs)}"
    fam = family(target)
    other_prefixes = [p for f, p in _FAMILY_PREFIX.items() if f != fam]
    if any(system_config.startswith(p) for p in other_prefixes):
        allowed = [s for s in ini.system_configs if not any(s.startswith(p) for p in other_prefixes)]
        return (
            f"system config {system_config!r} is for another NPU family than {target}; "
            f"allowed for {fam}: {', '.join(allowed)}"
        )
    return None


def memory_mode_reason(target: str, system_config: str, memory_mode: str, ini: VelaIni) -> str | None:
    """Why Vela (or the hardware) rejects this memory mode here, or None.

    Checked against Vela 5.1 on a real TOSA file:
    - Ethos-U55 has no dedicated SRAM (Vela documents Dedicated_Sram for U65/U85 only);
    - a dedicated-SRAM mode puts the arena on AXI1, which Vela requires to be
      SRAM or DRAM ("Invalid configuration of arena_mem_area=OffChipFlash").
    """
    if memory_mode not in ini.memory_modes:
        return f"memory mode {memory_mode!r} is not defined in {ini.path}; defined: {', '.join(ini.memory_modes)}"
    if is_dedicated_sram(memory_mode):
        fam = family(target)
        if fam == "ethos-u55":
            return f"{fam} has no dedicated SRAM, so {memory_mode} is not available on {target}"
        axi1 = ini.axi1_port(system_config)
        if ini.memory_mode_setting(memory_mode, "arena_mem_area") == "Axi1" and axi1 not in ("Sram", "Dram"):
            return (
                f"{memory_mode} puts the arena on AXI1, which is {axi1 or 'unset'} in "
                f"{system_config}; Vela needs SRAM or DRAM there"
            )
    return None


def invalid_combination_reason(target: str, system_config: str, memory_mode: str, ini: VelaIni) -> str | None:
    """Why this target / system config / memory mode cannot be compiled, or None."""
    return system_config_reason(target, system_config, ini) or memory_mode_reason(
        target, system_config, memory_mode, ini
    )


_FAMILY_PREFIX = {"ethos-u55": "Ethos_U55_", "ethos-u65": "Ethos_U65_", "ethos-u85": "Ethos_U85_"}


# The platform CPU-only cells' firmware is built for (firmware/platform/mps3-an547) and QEMU's
# board that runs it (a Cortex-M55 with MVE, no NPU).
CPU_BOARD = "mps3-an547"

# The FVP that simulates each NPU family (ExecuTorch's run_fvp.sh; Corstone-300 also has a U65 model).
FVP_BY_FAMILY = {
    "ethos-u55": "FVP_Corstone_SSE-300_Ethos-U55",
    "ethos-u65": "FVP_Corstone_SSE-300_Ethos-U65",
    "ethos-u85": "FVP_Corstone_SSE-320",
}
# The Corstone CPU each NPU family sits beside (the runner's target CPU).
CPU_BY_FAMILY = {"ethos-u55": "cortex-m55", "ethos-u65": "cortex-m55", "ethos-u85": "cortex-m85"}
