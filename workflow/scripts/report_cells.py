from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.report:write_cell_report",
    cell=snakemake.params.cell,
    per_layer=snakemake.input.per_layer,
    vela_summary=snakemake.input.vela_summary,
    delegation=snakemake.input.delegation,
    compile_meta=snakemake.input.compile_meta,
    verify_report=snakemake.input.verify_report,
    siblings=dict(zip(snakemake.params.sibling_modes, snakemake.input.siblings, strict=True)),
    fragment=snakemake.output.fragment,
)
