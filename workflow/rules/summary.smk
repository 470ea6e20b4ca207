rule summarize_sweep:
    input:
        compile_meta=every_cell_path(f"{COMPILED}/compile.json"),
        delegation=every_cell_path(f"{LOWERED}/delegation.json"),
        vela_summary=every_cell_path(f"{COMPILED}/summary.json"),
        pte=every_cell_path(f"{COMPILED}/model.pte"),
        header=every_cell_path(HEADER, when=HEADERS_PER_CELL),
        verify_report=verified_cell_paths(f"{VERIFY}/verify.json"),
        # the verifications of what fallback cells compiled from (verify_fallbacks)
        fallback_report=verified_cell_paths(f"{VERIFY}/fallbacks.json"),
        firmware_plan=every_cell_path(FIRMWARE_PLAN),
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
        cells=every_cell_record,
        fvp_cells=[c.id for c in fvp_cells()],
        npu_runner_cells=[c.id for c in npu_runner_cells()],
        npu_runner_state=npu_runner_states,
        tools=stage_versions("ethosweep.results.summary"),
        code=code_version("ethosweep.results.summary"),
    script:
        "../scripts/stage.py"
