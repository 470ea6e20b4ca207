from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.runner:build_executorch",
    executorch_src=snakemake.params.executorch_src,
    cpu=snakemake.wildcards.cpu,
    install_dir=snakemake.output.install,
    meta=snakemake.output.meta,
    log=snakemake.log[0],
    jobs=snakemake.threads,
    cmsis_nn=snakemake.params.cmsis_nn,
)
