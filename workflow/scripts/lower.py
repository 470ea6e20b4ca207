from ethosweep.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.lower:lower_cell",
    quantized=snakemake.input.quantized,
    target=snakemake.wildcards.target,
    system_config=snakemake.wildcards.system_config,
    memory_mode=snakemake.wildcards.memory_mode,
    vela=snakemake.params.vela,
    pte=snakemake.output.pte,
    tosa_dir=snakemake.output.tosa,
    delegation=snakemake.output.delegation,
    meta=snakemake.output.meta,
)
