from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.runner:build_npu_cell_runner",
    executorch_src=snakemake.params.executorch_src,
    install_dir=snakemake.input.install,
    pte=snakemake.input.pte,
    compile_meta=snakemake.input.meta,
    plan=snakemake.input.plan,
    cell=snakemake.params.cell,
    target=snakemake.wildcards.target,
    driver=snakemake.params.driver,
    cmsis=snakemake.params.cmsis,
    elf=snakemake.output.elf,
    firmware=snakemake.output.firmware,
    log=snakemake.log[0],
)
