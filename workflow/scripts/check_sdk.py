from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.sdk:write_check",
    sdk_status=snakemake.params.sdk,
    text=snakemake.params.text,
    check=snakemake.output.check,
)
