from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.compile.export:export_model",
    model=snakemake.params.model,
    seed=snakemake.params.seed,
    program=snakemake.output.program,
    inputs=snakemake.output.inputs,
    reference=snakemake.output.reference,
    meta=snakemake.output.meta,
    weights=snakemake.input.weights[0] if snakemake.input.weights else None,
)
