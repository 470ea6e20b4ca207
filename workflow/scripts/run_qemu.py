from ethosweep.runtime.jobs import run_stage

run_stage(
    snakemake,
    "ethosweep.firmware.qemu:qemu_cell",
    elf=snakemake.input.elf,
    pte=snakemake.input.pte,
    run_inputs=snakemake.input.run_inputs,
    reference=snakemake.input.reference,
    run_json=snakemake.output.run,
    log_out=snakemake.output.console,
    timeout=snakemake.params.timelimit,
    qemu=snakemake.params.qemu,
)
