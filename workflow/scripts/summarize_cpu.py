from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.results.cpu_summary:summarize",
    # reads every cell's outcome, failed ones included (ethosweep.runtime.outcome)
    aggregate=True,
    cells=snakemake.params.cells,
    meta=list(snakemake.input.meta),
    firmware=list(snakemake.input.firmware),
    qemu=list(snakemake.input.qemu),
    firmware_state=snakemake.params.firmware_state,
    qemu_state=snakemake.params.qemu_state,
    summary=snakemake.output.summary,
)
