rule summarize_sweep:
    input:
        lower_meta=cell_paths(f"results/lower/{CELL}/lower.json"),
        delegation=cell_paths(f"results/lower/{CELL}/delegation.json"),
        vela_summary=cell_paths(f"results/vela/{CELL}/summary.json"),
        pte=cell_paths(f"results/lower/{CELL}/model.pte"),
        header=cell_paths(f"results/header/{CELL}/model_pte.h"),
        verify_report=cell_paths(f"{VERIFY}/verify.json"),
    output:
        summary=SUMMARY,
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    params:
        cells=[cell_record(c) for c in SWEEP.cells],
        code=code_version("ethosweep.summary"),
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    script:
        "../scripts/summary.py"
