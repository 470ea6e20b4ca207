from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.report:write_index",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    summary=snakemake.input.summary,
    plots={name: snakemake.input[name] for name in ("cycles", "fit", "roofline", "pareto")},
    cells=snakemake.params.cells,
    cell_pages=snakemake.input.cell_pages,
    sweep_text=snakemake.params.sweep,
    index=snakemake.output.index,
    cpu_summary=snakemake.input.cpu_summary[0] if snakemake.input.cpu_summary else None,
    boards=snakemake.params.boards,
    budget_ms=snakemake.params.latency_budget_ms,
    board_budgets=snakemake.params.board_latency_budget_ms,
    operators=snakemake.input.operators,
    operator_models=snakemake.input.operator_models,
    opens_on=snakemake.params.opens_on,
    # only when the sweep has several Vela versions: their per-layer reports, side by side
    per_layer=dict(zip([c["id"] for c in snakemake.params.cells], snakemake.input.per_layer))
    if snakemake.input.per_layer
    else None,
)
