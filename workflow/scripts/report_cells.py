from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.report:write_cell_reports",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    cells=snakemake.params.cells,
    per_layer=list(snakemake.input.per_layer),
    vela_summary=list(snakemake.input.vela_summary),
    delegation=list(snakemake.input.delegation),
    compile_meta=list(snakemake.input.compile_meta),
    verify_report=list(snakemake.input.verify_report),
    fallback_report=list(snakemake.input.fallback_report),
    folder=snakemake.output.folder,
)
