rule lower_to_pte:
    input:
        quantized=quantized_program,
        vela_ini=custom_vela_ini,
    output:
        pte=ensure(f"results/lower/{CELL}/model.pte", non_empty=True),
        tosa=directory(f"results/lower/{CELL}/tosa"),
        delegation=f"results/lower/{CELL}/delegation.json",
        meta=f"results/lower/{CELL}/lower.json",
    log:
        f"logs/lower/{CELL}.log",
    benchmark:
        f"benchmarks/lower/{CELL}.tsv"
    params:
        vela=cell_vela_options,
        code=code_version("ethosweep.lower"),
    # a cell's short chain runs as one cluster job (group-components in the SLURM profile)
    group:
        "cell"
    threads: 1
    resources:
        # lowering MobileNetV2 peaks at ~1.1 GiB resident
        mem_mb=2000,
    conda:
        "../../envs/ethosweep.yaml"
    script:
        "../scripts/lower.py"
