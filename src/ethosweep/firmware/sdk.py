"""What the firmware and simulator stages need, and whether this machine has it.

The bare-metal runner needs an ExecuTorch *source checkout* of the installed version, Arm's
Ethos-U SDK (core_platform, core_driver) as ExecuTorch's `examples/arm/setup.sh` lays it out,
a cross toolchain and CMake; running it needs the Corstone FVPs. None of these is in a wheel,
and the SDK and FVPs are Arm downloads. The probe only looks at the filesystem and PATH (no
subprocess), so the Snakefile can call it while it parses: the DAG holds firmware and run jobs
only for what can be built and run here, and the summary says per cell what is missing.

Torch-free on purpose (see targets.py).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ethosweep.firmware.build_tools import environment_bins
from ethosweep.matrix.targets import FVP_BY_FAMILY, family

SETUP_HINT = (
    "on a machine with internet: git clone -b v{version} https://github.com/pytorch/executorch && "
    "cd executorch && examples/arm/setup.sh --i-agree-to-the-contained-eula"
)


@dataclass(frozen=True)
class Component:
    name: str
    path: str | None  # where it was found, or None
    problem: str = ""  # why it is not usable, when path is None or it is the wrong thing
    get_it: str = ""  # the command that gets it

    @property
    def ok(self) -> bool:
        return self.path is not None and not self.problem


@dataclass
class SdkStatus:
    executorch_version: str
    components: dict[str, Component] = field(default_factory=dict)

    # What each firmware path needs (keys of `components`):
    # ExecuTorch's arm_executor_runner (build_executor_runner.sh, Arm's Ethos-U SDK),
    # ethosweep's own runner for CPU-only cells, and that runner with the Ethos-U delegate.
    NEEDS = {
        "firmware": ("executorch_src", "setup_path", "ethos_u_sdk", "toolchain", "cmake"),
        "cpu_firmware": ("executorch_src", "toolchain", "cmake", "ninja"),
        "npu_runner": ("executorch_src", "toolchain", "cmake", "ninja", "ethos_u_driver", "cmsis"),
    }

    def missing(self, path: str) -> list[Component]:
        return [self.components[key] for key in self.NEEDS[path] if not self.components[key].ok]

    def line(self, path: str) -> str:
        """One line for the summary: what a firmware path lacks, or 'ready'."""
        missing = self.missing(path)
        if not missing:
            return "ready"
        return "not configured: " + "; ".join(f"{c.name}: {c.problem}" for c in missing)

    def firmware_missing(self) -> list[Component]:
        return self.missing("firmware")

    def firmware_ready(self) -> bool:
        return not self.missing("firmware")

    def firmware_line(self) -> str:
        return self.line("firmware")

    def cpu_firmware_ready(self) -> bool:
        return not self.missing("cpu_firmware")

    def cpu_firmware_line(self) -> str:
        return self.line("cpu_firmware")

    def npu_runner_line(self) -> str:
        return self.line("npu_runner")

    def qemu_line(self) -> str:
        qemu = self.components["qemu"]
        return "ready" if qemu.ok else f"not run: {qemu.problem}; get it: {qemu.get_it}"

    def fvp(self, target: str) -> Component:
        return self.components[f"fvp:{family(target)}"]

    def as_json(self) -> dict:
        return {
            "executorch_version": self.executorch_version,
            "firmware": self.firmware_line(),
            "cpu_firmware": self.cpu_firmware_line(),
            "npu_runner": self.npu_runner_line(),
            "qemu": self.qemu_line(),
            "components": {
                key: {"name": c.name, "found": c.path, "ok": c.ok, "problem": c.problem, "get_it": c.get_it}
                for key, c in self.components.items()
            },
        }


def installed_executorch_version() -> str:
    """'1.5.1' for the wheel 1.5.1+cpu (the checkout's version.txt has no local tag)."""
    try:
        return metadata.version("executorch").split("+")[0]
    except metadata.PackageNotFoundError:
        return "unknown"


def probe(sdk: dict | None, base: Path | None = None) -> SdkStatus:
    """Check every part the firmware and run stages need, from the config's `sdk` section."""
    sdk = sdk or {}
    base = base or Path.cwd()
    status = SdkStatus(executorch_version=installed_executorch_version())
    status.components.update(_sources(sdk, base, status.executorch_version))
    status.components.update(_programs(sdk, base))
    return status


def _sources(sdk: dict, base: Path, version: str) -> dict[str, Component]:
    """The source trees: ExecuTorch's checkout, its setup.sh's scratch folder, the Ethos-U SDK, the
    core driver and CMSIS (each from the config, or where setup.sh puts it)."""
    get_checkout = SETUP_HINT.format(version=version)
    components = {}
    src = _resolve(sdk.get("executorch_src"), base)
    components["executorch_src"] = _checkout(
        src, version, get_checkout, allow_other_version=bool(sdk.get("allow_version_mismatch"))
    )
    scratch = _resolve(sdk.get("ethos_u_tools_dir"), base) or (src / "examples/arm/arm-scratch" if src else None)
    setup_path = scratch / "setup_path.sh" if scratch else None
    components["setup_path"] = _exists(
        "setup_path.sh (from examples/arm/setup.sh)",
        setup_path,
        get_checkout,
        unset="no ExecuTorch checkout to look in" if not src and not scratch else "",
    )
    ethos_u = scratch / "ethos-u" if scratch else None
    components["ethos_u_sdk"] = _ethos_u_sdk(ethos_u, get_checkout)

    driver = _resolve(sdk.get("ethos_u_driver_src"), base) or (
        ethos_u / "core_software/core_driver" if ethos_u else None
    )
    components["ethos_u_driver"] = _exists(
        "Ethos-U core driver sources",
        driver,
        "setup.sh's ethos-u/core_software/core_driver, or a copy of Arm's core_driver (e.g. "
        "zephyrproject-rtos/hal_ethos_u) in sdk.ethos_u_driver_src",
        unset="sdk.ethos_u_driver_src is not set and there is no Ethos-U SDK to take it from",
    )
    cmsis = _resolve(sdk.get("cmsis_src"), base) or (driver.parent / "cmsis_6" if driver else None)
    components["cmsis"] = _exists(
        "CMSIS_6 (the core driver's headers)",
        cmsis,
        "git clone https://github.com/ARM-software/CMSIS_6 (sdk.cmsis_src)",
        unset="sdk.cmsis_src is not set",
    )

    return components


def _programs(sdk: dict, base: Path) -> dict[str, Component]:
    """The programs: the cross toolchain, CMake and Ninja, QEMU and the FVPs (on sdk.path or PATH)."""
    components = {}
    search_path = os.pathsep.join(
        filter(None, [*(str(_resolve(p, base)) for p in sdk.get("path", [])), os.environ.get("PATH", "")])
    )
    toolchain = sdk.get("toolchain", "arm-none-eabi-gcc")
    components["toolchain"] = _program(
        f"cross toolchain ({toolchain})",
        toolchain,
        search_path,
        "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib",
    )
    # CMake and Ninja: the locked ones in ethosweep's environment (uv.lock), or the user's from sdk.path
    user_path = os.pathsep.join(str(_resolve(p, base)) for p in sdk.get("path", []))
    for program, name in (("cmake", "CMake"), ("ninja", "Ninja")):
        where = os.pathsep.join(filter(None, [user_path, *environment_bins()]))
        components[program] = _program(name, program, where, "uv sync (uv.lock pins it)")
    qemu = sdk.get("qemu", "qemu-system-arm")
    components["qemu"] = _program(
        f"QEMU ({qemu}, for CPU-only cells)", qemu, search_path, "apt-get install qemu-system-arm"
    )
    for fam, program in FVP_BY_FAMILY.items():
        components[f"fvp:{fam}"] = _program(
            program,
            program,
            search_path,
            "Arm download under EULA, installed by examples/arm/setup.sh; or list its folder in sdk.path",
        )
    return components


def _resolve(value: str | None, base: Path) -> Path | None:
    if not value:
        return None
    path = Path(os.path.expanduser(str(value)))
    return path if path.is_absolute() else base / path


def _checkout(src: Path | None, version: str, get_it: str, allow_other_version: bool = False) -> Component:
    name = "ExecuTorch source checkout"
    if src is None:
        return Component(name, None, "sdk.executorch_src is not set", get_it)
    script = src / "backends/arm/scripts/build_executor_runner.sh"
    if not script.is_file():
        return Component(name, None, f"{src} has no backends/arm/scripts/build_executor_runner.sh", get_it)
    version_file = src / "version.txt"
    found = version_file.read_text().strip().split("+")[0] if version_file.is_file() else "unknown"
    # The runner's C++ must match the .pte schema and the delegate the wheel wrote.
    if not found.startswith(version):
        mismatch = f"{src} is ExecuTorch {found}, the installed wheel is {version}"
        if not allow_other_version:
            return Component(name, str(src), mismatch + " (sdk.allow_version_mismatch: true to use it anyway)", get_it)
        return Component(f"{name} (allowed: {mismatch})", str(src))
    return Component(name, str(src))


def _exists(name: str, path: Path | None, get_it: str, unset: str = "") -> Component:
    if path is None:
        return Component(name, None, unset or "not configured", get_it)
    if not path.exists():
        return Component(name, None, f"{path} does not exist", get_it)
    return Component(name, str(path))


def _ethos_u_sdk(root: Path | None, get_it: str) -> Component:
    name = "Ethos-U SDK (core_platform, core_driver)"
    if root is None:
        return Component(name, None, "no ExecuTorch checkout or sdk.ethos_u_tools_dir to look in", get_it)
    wanted = [root / "core_platform", root / "core_software" / "core_driver"]
    absent = [str(p) for p in wanted if not p.is_dir()]
    if absent:
        return Component(name, None, f"missing {', '.join(absent)}", get_it)
    return Component(name, str(root))


def _program(name: str, program: str, search_path: str, get_it: str) -> Component:
    found = shutil.which(program, path=search_path)
    if found is None:
        return Component(name, None, f"{program} not found on PATH or sdk.path", get_it)
    return Component(name, found)


def format_status(status: SdkStatus) -> str:
    """A table of every part: found where, or what is wrong and how to get it."""
    lines = [
        f"ExecuTorch wheel {status.executorch_version}",
        f"Ethos-U firmware (arm_executor_runner): {status.firmware_line()}",
        f"CPU-only firmware (ethosweep runner): {status.cpu_firmware_line()}; QEMU: {status.qemu_line()}",
        "",
    ]
    for component in status.components.values():
        if component.ok:
            lines.append(f"  ok       {component.name}: {component.path}")
        else:
            lines.append(f"  missing  {component.name}: {component.problem}")
            lines.append(f"           get it: {component.get_it}")
    return "\n".join(lines)


def write_check(sdk_status: dict, text: str, check: str) -> dict:
    """The check_sdk job: the probe's findings (made at parse time) as JSON, the table in the log."""
    from ethosweep.runtime.io import write_json

    print(text)
    write_json(check, sdk_status)
    return sdk_status
