# The report: a detail page per cell, four plots, and one self-contained HTML page. The cells'
# pages are one job (milliseconds a page; a job per cell cost as much as the cell's Vela run),
# each listed in Snakemake's own report (`snakemake --report`) with the cell's labels.
rule report_cells:
    input:
        per_layer=every_cell_path(f"{COMPILED}/per_layer.csv"),
        vela_summary=every_cell_path(f"{COMPILED}/summary.json"),
        delegation=every_cell_path(f"{LOWERED}/delegation.json"),
        compile_meta=every_cell_path(f"{COMPILED}/compile.json"),
        verify_report=verified_cell_paths(f"{VERIFY}/verify.json"),
        fallback_report=verified_cell_paths(f"{VERIFY}/fallbacks.json"),
    output:
        folder=report(
            directory("results/report/cells"),
            patterns=["{model}/{quant}/{target}/{system_config}/{memory_mode}{vela_tag}.html"],
            caption="../report/cell.rst",
            category="Cells",
            subcategory="{model}",
            labels={
                "model": "{model}",
                "quantization": "{quant}",
                "target": "{target}",
                "memory mode": "{memory_mode}",
                "Vela": "{vela_tag}",
            },
        ),
    log:
        "logs/report/cells.log",
    benchmark:
        "benchmarks/report/cells.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.report.cells:write_cell_reports",
        aggregate=True,
        cells=every_cell_record,
        tools=stage_versions("ethosweep.results.report.cells"),
        code=code_version("ethosweep.results.report.cells"),
    script:
        "../scripts/stage.py"


rule report_plots:
    input:
        summary=SUMMARY,
    output:
        cycles=report(
            "results/report/cycles.svg",
            caption="../report/cycles.rst",
            category="Overview",
            labels={"figure": "inference time"},
        ),
        fit=report(
            "results/report/fit.svg", caption="../report/fit.rst", category="Overview", labels={"figure": "board fit"}
        ),
        roofline=report(
            "results/report/roofline.svg",
            caption="../report/roofline.rst",
            category="Overview",
            labels={"figure": "NPU utilisation"},
        ),
        pareto=report(
            "results/report/pareto.svg",
            caption="../report/pareto.rst",
            category="Overview",
            labels={"figure": "Pareto"},
        ),
    log:
        "logs/report/plots.log",
    benchmark:
        "benchmarks/report/plots.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.report.plots:write_plots",
        aggregate=True,
        boards={name: board.as_params() for name, board in SWEEP.boards.items()},
        tools=stage_versions("ethosweep.results.report.plots"),
        code=code_version("ethosweep.results.report.plots"),
    script:
        "../scripts/stage.py"


# The operator map: which operators of the zoo run where, per NPU family and scheme (see
# ethosweep/results/operators.py); from every (model, scheme, profile)'s delegation table.
rule map_operators:
    input:
        delegation=[f"results/lower/{m}/{q}/{p}/delegation.json" for m, q, p in SWEEP.quantize_keys()],
        vela_summary=every_cell_path(f"{COMPILED}/summary.json"),
    output:
        operators="results/operators.csv",
        models="results/operator_models.csv",
    log:
        "logs/report/operators.log",
    benchmark:
        "benchmarks/report/operators.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.operators:write_operator_map",
        aggregate=True,
        profiles=[{"model": m, "quant": q, "profile": p} for m, q, p in SWEEP.quantize_keys()],
        cells=every_cell_record,
        tools=stage_versions("ethosweep.results.operators"),
        code=code_version("ethosweep.results.operators"),
    script:
        "../scripts/stage.py"


rule report_index:
    input:
        summary=SUMMARY,
        operators="results/operators.csv",
        operator_models="results/operator_models.csv",
        cycles="results/report/cycles.svg",
        fit="results/report/fit.svg",
        roofline="results/report/roofline.svg",
        pareto="results/report/pareto.svg",
        cell_pages="results/report/cells",
        cpu_summary=[CPU_SUMMARY] if SWEEP.cpu_cells else [],
        # several Vela versions: the layer whose cycles moved most, from each cell's per-layer report
        per_layer=every_cell_path(f"{COMPILED}/per_layer.csv", when=len(SWEEP.vela_versions()) > 1),
    output:
        index=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Overview",
            labels={"figure": "the whole report"},
        ),
    log:
        "logs/report/index.log",
    benchmark:
        "benchmarks/report/index.tsv"
    localrule: True
    conda:
        "../../envs/ethosweep.yaml"
    params:
        stage="ethosweep.results.report.index:write_index",
        aggregate=True,
        cells=every_cell_record,
        sweep_text=SWEEP.describe().removeprefix("ethosweep: "),
        boards={name: board.as_params() for name, board in SWEEP.boards.items()},
        latency_budget_ms=report_setting("latency_budget_ms", None),
        board_latency_budget_ms=report_setting("board_latency_budget_ms", {}),
        opens_on=report_setting("opens_on", "pick"),
        tools=stage_versions("ethosweep.results.report.index"),
        code=code_version("ethosweep.results.report.index"),
    script:
        "../scripts/stage.py"
