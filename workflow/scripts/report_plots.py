from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.report:write_plots",
    # the end of the run: it describes every cell or fails as a job (never recorded)
    aggregate=True,
    summary=snakemake.input.summary,
    boards=snakemake.params.boards,
    outputs={name: snakemake.output[name] for name in ("cycles", "fit", "roofline", "pareto")},
)
