from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.executor_runner:run_on_fvp",
    target=snakemake.wildcards.target,
    elf=snakemake.input.elf,
    program=snakemake.input.program,
    plan=snakemake.input.plan,
    run=snakemake.output.run,
    uart=snakemake.output.uart,
    timelimit_s=snakemake.params.timelimit,
)
