from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.vela.environment:create_environment",
    # a version the registry does not have is its cells' outcome: the record goes in the venv folder
    directories=[snakemake.output.venv],
    version=snakemake.wildcards.vela_version,
    venv=snakemake.output.venv,
    lock=snakemake.output.lock,
    env_json=snakemake.output.env,
)
