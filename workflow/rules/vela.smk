# Standalone Vela on each partition's TOSA (no torch: well under a second per partition).
rule run_vela:
    input:
        tosa=f"results/lower/{CELL}/tosa",
        meta=f"results/lower/{CELL}/lower.json",
        vela_ini=custom_vela_ini,
    output:
        summary=f"results/vela/{CELL}/summary.json",
        per_layer=f"results/vela/{CELL}/per_layer.csv",
    log:
        f"logs/vela/{CELL}.log",
    benchmark:
        f"benchmarks/vela/{CELL}.tsv"
    params:
        vela=cell_vela_options,
        code=code_version("ethosweep.vela"),
    # a cell's short chain runs as one cluster job (group-components in the SLURM profile)
    group:
        "cell"
    threads: 1
    resources:
        mem_mb=500,
    conda:
        "../../envs/ethosweep.yaml"
    script:
        "../scripts/vela.py"
