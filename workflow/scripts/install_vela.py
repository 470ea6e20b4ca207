from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.vela.environment:create_environment",
    version=snakemake.wildcards.vela_version,
    venv=snakemake.output.venv,
    lock=snakemake.output.lock,
    env_json=snakemake.output.env,
)
