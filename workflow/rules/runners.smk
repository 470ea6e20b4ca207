# Helpers for the firmware, FVP and CPU-only rules (functions apart from rules, as Snakemake's
# lint asks): which cells get a runner, an FVP run or a QEMU run on this machine.


# ethosweep's own NPU runner per cell (workflow/rules/firmware.smk, link_npu_runner)
NPU_RUNNER = f"results/firmware/cells/{CELL}"


def npu_runner_state(cell):
    return ethosweep_targets.npu_runner_state(cell.target, SDK.npu_runner_line())


def npu_runner_states(wildcards):
    return [npu_runner_state(c) for c in SWEEP.cells]


def npu_runner_cells():
    """The cells whose NPU runner this machine links (Ethos-U55/U65, driver sources configured)."""
    return [c for c in SWEEP.cells if npu_runner_state(c) == "ready"]


RUNNER = "{target}/{system_config}/{memory_mode}"


def runner_cells(wildcards):
    return SWEEP.cells_of(
        target=wildcards.target, system_config=wildcards.system_config, memory_mode=wildcards.memory_mode
    )


def runner_cell_paths(pattern):
    return lambda wildcards: cell_paths(pattern, runner_cells(wildcards))


FIRMWARE_PLAN = "results/firmware/{target}/{system_config}/{memory_mode}/plan.json"
FIRMWARE_ELF = "results/firmware/{target}/{system_config}/{memory_mode}/arm_executor_runner"


def fvp_program(wildcards):
    """What the FVP hands the runner: the BundleIO program with `numerics.bundleio`, else the .pte."""
    if numerics("bundleio"):
        return f"results/bundle/{CELL}/model.bpte".format(**wildcards)
    return f"{COMPILED}/model.pte".format(**wildcards)


def fvp_cells():
    """The cells this machine can run on an FVP (firmware buildable, the family's FVP found)."""
    if not SDK.firmware_ready():
        return []
    return [c for c in SWEEP.cells if SDK.fvp(c.target).ok]


CPU_SUMMARY = "results/cpu/summary.csv"


def cpu_cell_paths(pattern):
    """`pattern` (with {model}, {quant}, {cpu}) for every CPU-only cell."""
    return [pattern.format(model=c.model, quant=c.quant, cpu=c.cpu) for c in SWEEP.cpu_cells]


def cpu_qemu_ready():
    return SDK.cpu_firmware_ready() and SDK.components["qemu"].ok


def sdk_path(key):
    """A path from the config's `sdk` section, absolute (jobs may run elsewhere), or None."""
    value = config.get("sdk", {}).get(key)
    return str(Path(os.path.expanduser(value)).resolve()) if value else None
