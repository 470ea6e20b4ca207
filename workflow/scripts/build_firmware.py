from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.executor_runner:build_executor_runner",
    plan=snakemake.input.plan,
    elf=snakemake.output.elf,
    sizes=snakemake.output.sizes,
)
