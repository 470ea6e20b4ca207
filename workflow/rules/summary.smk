rule summarize_sweep:
    input:
        compile_meta=cell_paths(f"{COMPILED}/compile.json"),
        delegation=cell_paths(f"{LOWERED}/delegation.json"),
        vela_summary=cell_paths(f"{COMPILED}/summary.json"),
        pte=cell_paths(f"{COMPILED}/model.pte"),
        header=cell_paths(HEADER) if HEADERS_PER_CELL else [],
        verify_report=verified_cell_paths(f"{VERIFY}/verify.json"),
        # the verifications of what fallback cells compiled from (verify_fallbacks)
        fallback_report=verified_cell_paths(f"{VERIFY}/fallbacks.json"),
        firmware_plan=cell_paths(FIRMWARE_PLAN),
        fvp_run=[f"results/run/{c.id}/run.json" for c in fvp_cells()],
        npu_runner=[f"{NPU_RUNNER}/firmware.json".format(**_cell_fields(c)) for c in npu_runner_cells()],
    output:
        summary=SUMMARY,
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.summary:summarize",
        aggregate=True,
        cells=[cell_record(c) for c in SWEEP.cells],
        fvp_cells=[c.id for c in fvp_cells()],
        npu_runner_cells=[c.id for c in npu_runner_cells()],
        npu_runner_state=[npu_runner_state(c) for c in SWEEP.cells],
        tools=stage_versions("ethosweep.results.summary"),
        code=code_version("ethosweep.results.summary"),
    script:
        "../scripts/stage.py"
