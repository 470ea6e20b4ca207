from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.deploy.deploy:bundle_deployment",
    directories=[snakemake.output.bundle],
    board=snakemake.params.board,
    cell=snakemake.params.cell,
    pte=snakemake.input.pte,
    header=snakemake.input.header,
    meta=snakemake.input.meta,
    vela_summary=snakemake.input.vela_summary,
    bundle=snakemake.output.bundle,
)
