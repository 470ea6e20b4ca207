"""Vela's reports: parsing real recorded output and combining partitions."""

from pathlib import Path

import pytest

from ethosweep.vela.compile import aggregate, mac_utilisation
from ethosweep.vela.partitions import read_per_layer, read_summary
from ethosweep.verify.verdicts import PASSED

DATA = Path(__file__).parent / "data" / "vela"


def test_parses_a_real_vela_summary():
    # Recorded from Vela 5.1.0 on the seed MNIST model, ethos-u55-128 / Shared_Sram.
    summary = read_summary(DATA / "mnist_u55_128_summary_Ethos_U55_High_End_Embedded.csv")
    assert summary["cycles_total"] == 138824
    assert summary["cycles_npu"] == 52036
    assert summary["nn_macs"] == 1135872
    assert summary["sram_memory_used"] == pytest.approx(18.09375)
    assert summary["core_clock"] == 500e6
    assert summary["system_config"] == "Ethos_U55_High_End_Embedded"


def test_per_layer_macs_add_up_to_the_network_total():
    layers = read_per_layer(DATA / "mnist_u55_128_per-layer.csv")
    assert [layer["NNG Operator"] for layer in layers][:4] == ["Conv2D", "MaxPool", "Conv2D", "MaxPool"]
    assert sum(layer["MAC Count"] for layer in layers) == 1135872
    # The first fully connected layer dominates: its 100 KB of weights stream from
    # off-chip flash, so its cycles are the flash access cycles, not the NPU's.
    hottest = max(layers, key=lambda layer: layer["Op Cycles"])
    assert (hottest["MAC Count"], hottest["Op Cycles"], hottest["OffFlash AC"], hottest["NPU"]) == (
        100352,
        101008,
        101008,
        15796,
    )


def test_partitions_add_up_except_sram_which_is_reused():
    first = read_summary(DATA / "mnist_u55_128_summary_Ethos_U55_High_End_Embedded.csv")
    second = {
        **first,
        "cycles_total": 1000,
        "cycles_npu": 400,
        "nn_macs": 768,
        "inference_time": 2e-6,
        "sram_memory_used": 2.0,
        "off_chip_flash_memory_used": 1.5,
    }
    cell = aggregate([first, second])
    assert cell["partitions"] == 2
    assert cell["cycles_total"] == 139824
    assert cell["nn_macs"] == 1135872 + 768
    assert cell["sram_memory_used"] == pytest.approx(18.09375)  # the larger partition's arena
    assert cell["off_chip_flash_memory_used"] == pytest.approx(107.0)
    assert cell["inference_time_ms"] == pytest.approx(0.277648 + 0.002)


def test_mac_utilisation_is_against_the_accelerators_peak():
    assert mac_utilisation(1135872, 138824, "Ethos_U55_128") == pytest.approx(1135872 / (138824 * 128))
    assert mac_utilisation(1, 0, "Ethos_U55_128") is None


def test_what_vela_refuses_is_found_named_in_the_models_terms_and_kept_on_the_cpu(tmp_path):
    """tests/models/residual_int16.py, a16w8 on Ethos-U55: Vela 5.1.0 refuses its residual add of a
    convolution's accumulator. Bisection over the partition finds that part and names it by the
    model's modules; the smallest part is kept as a reproducer Vela still refuses; kept on the CPU
    by `keep_on_cpu` (ExecuTorch's own DontPartition check), the rest compiles."""
    from ethosweep.compile.compile_spec import vela_flags
    from ethosweep.matrix.cell import Cell
    from ethosweep.runtime.io import read_json
    from ethosweep.runtime.isolation import ToolFailed
    from ethosweep.vela.partitions import VelaFailure, compile_partition
    from ethosweep.verify import chain
    from ethosweep.verify.chain import export, lower, quantize, verify

    model = {"name": "residual", "file": "tests/models/residual_int16.py"}
    export(tmp_path, model)
    quantize(tmp_path, "residual", "a16w8")

    def cell(lowered: Path, out: str):
        return chain.cell(lowered, tmp_path / out, tosa_sources=str(lowered / "tosa_sources.json"))

    lowered = lower(tmp_path, "residual")
    with pytest.raises(VelaFailure) as refused:
        cell(lowered, "cell")
    reason = str(refused.value)
    assert reason.startswith(
        "Vela 5.1.0 cannot compile stem, project (conv2d, int16 in, 3x3, stride 1, 8 channels) in partition 0 on "
        "ethos-u55-128 / Shared_Sram: Non-passthrough operation (Conv2D) could not run on NPU "
        "(found by Vela on parts of it)"
    )
    (part,) = refused.value.details["refused"]
    assert part["modules"] == ["stem", "project"] and "add" in part["nodes"]
    assert part["operators"].count("CONV2D") == 2 and "ADD" in part["operators"]
    # the smallest part of the partition Vela still refuses, in the reproducer
    smallest = (tmp_path / "cell/repro/partition_0_refused.tosa").read_bytes()
    flags = vela_flags(Cell("model", "int8", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"))
    with pytest.raises(ToolFailed, match="Non-passthrough operation"):
        compile_partition(smallest, flags, tmp_path / "again", "Vela")
    # the residual add kept on the CPU: the rest compiles, both convolutions on the NPU
    kept = lower(tmp_path, "residual", keep_on_cpu=[{"operator": "aten.add.Tensor"}], into="kept")
    record = read_json(kept / "lower.json")
    compiled = cell(kept, "kept_cell")
    assert record["delegated"] == "partial" and compiled["pte_bytes"] > 0
    # and it computes what the quantized model computes: the NPU partitions on the TOSA reference model
    verified = verify(tmp_path, "residual", kept)
    npu = next(c for c in verified["checks"] if c["name"] == "npu")
    # rounding apart at most (2 int16 steps over the 40 random inputs)
    assert npu["verdict"] in PASSED and verified["metrics"]["max_error_steps"] <= 2, npu


def test_a_residual_add_kept_on_the_cpu_leaves_no_float_dequantize_in_a_partition(tmp_path, monkeypatch):
    """MobileNetV2's blocks, a16w8, the first residual add kept on the CPU (what the fallback keeps
    on Ethos-U55). ExecuTorch's own partitioner with that check leaves a dequantize ending a
    partition and the integer-only lowering fails; ethosweep's (ExecuTorch's boundary rule repeated
    until nothing changes, compile.delegation.keeping_partitioner) lowers it, and what it computes
    matches the quantized model. When the first assertion fails, ExecuTorch fixed it: drop ours."""
    from executorch.backends.arm.ethosu import EthosUPartitioner

    from ethosweep.compile import delegation
    from ethosweep.compile.artifacts import load_quantized
    from ethosweep.runtime.io import read_json
    from ethosweep.verify.chain import export, lower, quantize, verify

    model = {"name": "blocks", "file": "tests/models/inverted_residuals.py"}
    export(tmp_path, model)
    quantize(tmp_path, "blocks", "a16w8")
    keep = [{"node": "add"}]
    with monkeypatch.context() as upstream:
        upstream.setattr(delegation, "keeping_partitioner", lambda: EthosUPartitioner)
        with pytest.raises(Exception) as failed:
            delegation.lower_to_edge(load_quantized(tmp_path / "blocks.pt2"), "u55", keep)
    assert "doesn't support float32 for MUL" in str(failed.value.__cause__)

    kept = lower(tmp_path, "blocks", keep_on_cpu=keep, into="kept")
    table = read_json(kept / "delegation.json")
    # ExecuTorch's own rule (a partition's first node with a float input leaves it) takes the next
    # block's add and a convolution along: the price of its partitioner, not of the check
    assert table["delegated"] == "partial" and table["cpu_operators"]["aten_add_tensor"] >= 1, table
    assert table["npu_ops"] > table["cpu_compute_ops"], table
    verified = verify(tmp_path, "blocks", kept)
    npu = next(c for c in verified["checks"] if c["name"] == "npu")
    # a few int16 steps off the quantized model at most (3 here: the CPU's float add rounds apart)
    assert npu["verdict"] in PASSED and verified["metrics"]["max_error_steps"] <= 8, npu


def test_a_partition_too_large_for_its_memory_modes_sram_is_a_cell_that_does_not_fit(tmp_path):
    from ethosweep.results.picks import board_pick
    from ethosweep.results.summary import failed_rows
    from ethosweep.results.terminal import format_table, outcome
    from ethosweep.runtime.isolation import ToolFailed
    from ethosweep.runtime.outcome import failure_record
    from ethosweep.vela.partitions import Search, VelaRun, vela_failure

    # Vela 5.1.0's words on YOLOv9t a16w8, ethos-u65-256 / Dedicated_Sram_256KB (the deployed zoo):
    # making it takes the optional zoo models and minutes of Vela; its allocator overshoots the
    # arena by a few hundred bytes, which no small model here reaches (Vela fits those in DRAM)
    said = "Vela on partition 0: Compilation failed: Failed to allocate tensors. Memory used 262592, limit 262144)"
    where = "ethos-u65-256 / Dedicated_Sram_256KB (Ethos_U65_High_End)"
    run = VelaRun(["--memory-mode=Dedicated_Sram_256KB"], where, None, None, tmp_path / "repro", {})
    failure = vela_failure(ToolFailed(said), 0, b"partition", run, Search(None, ""))
    assert failure.reason.startswith(
        f"does not fit: Vela needs 262,592 bytes of SRAM for partition 0's tensors, {where} gives it 262,144"
    )
    assert failure.details == {"does_not_fit": {"sram_bytes_needed": 262592, "sram_bytes_given": 262144}}
    assert (tmp_path / "repro/partition_0.tosa").read_bytes() == b"partition"  # a reproducer all the same
    record = failure_record("vela", failure.reason, "logs/vela/x.log", "job", "out", details=failure.details)
    cell = {"model": "m", "quant": "a16w8", "target": "ethos-u65-256", "system_config": "Ethos_U65_High_End"}
    (row,) = failed_rows({**cell, "memory_mode": "Dedicated_Sram_256KB"}, record)
    assert (row["status"], outcome(row)) == ("does not fit", "does not fit")
    assert board_pick("m", [row], None).verdict == "does not fit"
    # under the end of the run's table, said once
    (line,) = [x for x in format_table([row]).splitlines() if "[a16w8]" in x]
    assert line.startswith("  does not fit: m [a16w8] ethos-u65-256 / Dedicated_Sram_256KB: vela: Vela needs 262,592")
    # any other Vela failure stays a failure
    other = vela_failure(ToolFailed("Vela on partition 0: boom"), 0, b"p", run, Search(None, ""))
    (row,) = failed_rows({**cell, "memory_mode": "Dedicated_Sram_256KB"}, {**record, "does_not_fit": None})
    assert "does_not_fit" not in other.details and (row["status"], outcome(row)) == ("failed", "failed")
