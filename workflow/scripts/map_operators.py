from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.operators:write_operator_map",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    keys=snakemake.params.profiles,
    delegation=list(snakemake.input.delegation),
    cells=snakemake.params.cells,
    vela_summary=list(snakemake.input.vela_summary),
    operators=snakemake.output.operators,
    models=snakemake.output.models,
)
