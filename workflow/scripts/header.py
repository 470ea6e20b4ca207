from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.deploy.header:write_header",
    pte=snakemake.input.pte,
    meta=snakemake.input.meta,
    header=snakemake.output.header,
    symbol=snakemake.params.symbol,
)
