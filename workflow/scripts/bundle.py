from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.deploy.bundle:bundle_program",
    pte=snakemake.input.pte,
    meta=snakemake.input.meta,
    bundle_io=snakemake.input.bundle_io,
    bpte=snakemake.output.bpte,
)
