from ethosweep.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.summary:summarize",
    cells=snakemake.params.cells,
    lower_meta=list(snakemake.input.lower_meta),
    delegation=list(snakemake.input.delegation),
    vela_summary=list(snakemake.input.vela_summary),
    pte=list(snakemake.input.pte),
    header=list(snakemake.input.header),
    verify_report=list(snakemake.input.verify_report),
    summary=snakemake.output.summary,
)
