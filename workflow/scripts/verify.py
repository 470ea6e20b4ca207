from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.verify.numerics:verify_numerics",
    program=snakemake.input.program,
    quantized=snakemake.input.quantized,
    inputs=snakemake.input.inputs,
    edge=snakemake.input.edge,
    lower_meta=snakemake.input.lower_meta,
    tosa_sources=snakemake.input.tosa_sources,
    report=snakemake.output.report,
    bundle_io=snakemake.output.bundle_io,
    dataset=snakemake.params.dataset,
    classifier=snakemake.params.classifier,
    seed=snakemake.params.seed,
    evaluation_samples=snakemake.params.evaluation_samples,
    random_samples=snakemake.params.random_samples,
    min_agreement=snakemake.params.min_agreement,
    max_error_steps=snakemake.params.max_error_steps,
    min_cosine=snakemake.params.min_cosine,
    max_relative_error=snakemake.params.max_relative_error,
    bundle_samples=snakemake.params.bundle_samples,
)
