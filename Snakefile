# ethosweep: compile every model x Ethos-U target x memory mode cell of config/config.yaml
# with ExecuTorch's Arm backend, and summarize the matrix.
#
#   [train] -> export -> quantize -> lower (.pte, TOSA) -> vela report -> header
#                                \-> verify (TOSA reference model on data)  -> summary
#   lower -> firmware plan (pools) -> [runner build -> FVP run, where the SDK is configured]
#   export -> CPU-only lowering (Cortex-M, no NPU) -> [runner ELF -> QEMU run, where configured]
import gc

from snakemake.utils import min_version

from ethosweep.runtime.bytecode import compile_package

min_version("9.0")
# ethosweep's modules compiled once for the run's jobs, before the rules import them too
# (ethosweep.runtime.bytecode)
compile_package()


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/messages.smk"
include: "workflow/rules/runners.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/quantize.smk"
include: "workflow/rules/lower.smk"
include: "workflow/rules/vela.smk"
include: "workflow/rules/verify.smk"
include: "workflow/rules/firmware.smk"
include: "workflow/rules/cpu.smk"
include: "workflow/rules/deploy.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/report.smk"


# What exists by now (Snakemake's and ethosweep's modules, the config, the rules) lives as long as
# the run: out of the cyclic GC's reach, its collections stop walking it again as the DAG grows.
gc.freeze()


rule all:
    default_target: True
    input:
        all_outputs,
    localrule: True
    # Without a message Snakemake lists every output of the matrix here.
    message:
        "All cells compiled: see results/summary.csv and results/report/index.html"


onstart:
    say_what_the_run_will_do()
    forget_end_of_run()


# The warm worker (ethosweep.runtime.worker) is left to its idle timeout: the next run starts warm.
onsuccess:
    print_summary_table()


onerror:
    say_what_stopped_the_run()
