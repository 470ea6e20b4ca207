from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.compile.train:train_model",
    model=snakemake.params.model,
    seed=snakemake.params.seed,
    dataset=snakemake.params.dataset,
    train=snakemake.params.train,
    weights=snakemake.output.weights,
    meta=snakemake.output.meta,
)
