from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.report:write_plots",
    summary=snakemake.input.summary,
    boards=snakemake.params.boards,
    outputs={name: snakemake.output[name] for name in ("cycles", "fit", "roofline", "pareto")},
)
