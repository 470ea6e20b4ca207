from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.vela.compile:compile_cell",
    template=snakemake.input.template,
    lower_meta=snakemake.input.lower_meta,
    target=snakemake.wildcards.target,
    system_config=snakemake.wildcards.system_config,
    memory_mode=snakemake.wildcards.memory_mode,
    vela=snakemake.params.vela,
    pte=snakemake.output.pte,
    summary=snakemake.output.summary,
    per_layer=snakemake.output.per_layer,
    meta=snakemake.output.meta,
    repro=snakemake.params.repro,
)
