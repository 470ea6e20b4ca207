from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.compile.lower:lower_to_tosa",
    directories=[snakemake.output.tosa],
    quantized=snakemake.input.quantized,
    profile=snakemake.wildcards.tosa_profile,
    template=snakemake.output.template,
    tosa_dir=snakemake.output.tosa,
    edge=snakemake.output.edge,
    delegation=snakemake.output.delegation,
    tosa_sources=snakemake.output.tosa_sources,
    meta=snakemake.output.meta,
    keep_on_cpu=snakemake.params.keep_on_cpu,
)
