from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.runner:build_cell_runner",
    executorch_src=snakemake.params.executorch_src,
    install_dir=snakemake.input.install,
    pte=snakemake.input.pte,
    lower_meta=snakemake.input.meta,
    elf=snakemake.output.elf,
    firmware=snakemake.output.firmware,
    log=snakemake.log[0],
)
