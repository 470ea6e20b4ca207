from ethosweep.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.vela:vela_cell",
    tosa_dir=snakemake.input.tosa,
    meta=snakemake.input.meta,
    target=snakemake.wildcards.target,
    system_config=snakemake.wildcards.system_config,
    memory_mode=snakemake.wildcards.memory_mode,
    vela=snakemake.params.vela,
    summary=snakemake.output.summary,
    per_layer=snakemake.output.per_layer,
)
