from ethosweep.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware:build_runner",
    plan=snakemake.input.plan,
    elf=snakemake.output.elf,
    sizes=snakemake.output.sizes,
)
