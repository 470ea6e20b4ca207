from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.verify.numerics:verify_numerics",
    reads_failures=[name for name in snakemake.input.keys() if name.startswith("same_as_")],
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
    max_random_samples=snakemake.params.max_random_samples,
    min_agreement=snakemake.params.min_agreement,
    max_error_steps=snakemake.params.max_error_steps,
    max_error_steps_int16=snakemake.params.max_error_steps_int16,
    min_cosine=snakemake.params.min_cosine,
    max_relative_error=snakemake.params.max_relative_error,
    bundle_samples=snakemake.params.bundle_samples,
    repro=snakemake.params.repro,
    quantize_meta=snakemake.input.get("quantize_meta"),
    delegation=snakemake.input.get("delegation"),
    same_as={
        name.removeprefix("same_as_"): path for name, path in snakemake.input.items() if name.startswith("same_as_")
    },
)
