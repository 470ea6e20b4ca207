"""The CPU side of a cell: what it leaves on the CPU, whether the runner has kernels for it, what its
time covers, and the layout work the NPU does (transposes), in the summary, the report and the map."""

from __future__ import annotations

import csv
import html
import shutil

import pytest

from conftest import REPO, make_workdir, snakemake
from ethosweep.firmware.kernels import check_kernels, kernel_libraries, operators_in, will_not_load
from ethosweep.results.picks import bare_pick, board_pick
from ethosweep.verify.verdicts import PASSED

DS_CNN_U55 = "ds_cnn/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram"


def rows_of(workdir) -> dict[tuple[str, str], dict]:
    with open(workdir / "results/summary.csv", newline="") as f:
        return {(r["model"], r["target"]): r for r in csv.DictReader(f) if not r["board"] or r["board"] == "alif-e8"}


def swept(tmp_path, models: list[dict], **config):
    """(working directory, the run) of a sweep of these models (the test models beside them) on
    Shared_Sram, without CPU targets; `config` adds or overrides keys."""
    work = make_workdir(tmp_path, {"models": models, "memory_modes": ["Shared_Sram"], "cpu_targets": [], **config})
    shutil.copytree(REPO / "tests" / "models", work / "tests" / "models")
    return work, snakemake(work)


def test_the_kernel_lists_are_read_as_the_runner_builds_them():
    assert operators_in("- op: exp.out\n  kernels: []\n- func: cortex_m::quantize_per_tensor.out(Tensor x) -> T\n") == [
        "aten::exp.out",
        "cortex_m::quantize_per_tensor.out",
    ]
    libraries = kernel_libraries()
    assert libraries["aten::avg_pool2d.out"] == "portable"
    assert libraries["cortex_m::quantize_per_tensor.out"] == "cortex_m"
    assert libraries["quantized_decomposed::add.out"] == "quantized"
    assert check_kernels(["aten::avg_pool2d.out", "aten::sort.values"]) == {
        "kernels": {"aten::avg_pool2d.out": "portable"},
        "missing": ["aten::sort.values"],
    }
    assert will_not_load([]) == ""


def test_a_partly_delegated_cell_shows_its_cpu_part_in_every_figure(tiny_sweep):
    """DS-CNN on Ethos-U55: its 24x5 average pool stays on the CPU. Its row says what the CPU does
    (the pool's window sums, the bytes it reads and writes, the hand-overs), that the runner has its
    kernel, and that Vela's time is the NPU part's; MNIST, whole on the NPU, says so too."""
    rows = rows_of(tiny_sweep)
    ds_cnn, mnist = rows["ds_cnn", "ethos-u55-128"], rows["mnist", "ethos-u55-128"]
    assert (ds_cnn["status"], ds_cnn["cpu_operators"]) == ("ok", "aten_avg_pool2d_default x1")
    # a 24x5 pool over 64 channels: one 120-value window sum per output value
    assert int(ds_cnn["cpu_macs"]) == 64 * 24 * 5 and float(ds_cnn["cpu_tensor_kib"]) > 0
    assert int(ds_cnn["npu_cpu_switches"]) == 2 and ds_cnn["cpu_kernels_missing"] == ""
    assert ds_cnn["vela_time_covers"].startswith("the NPU part only: the CPU's 1 operator(s) are not timed")
    assert mnist["vela_time_covers"] == "the whole model" and mnist["cpu_macs"] == "0"
    page = html.unescape((tiny_sweep / "results/report/cells" / f"{DS_CNN_U55}.html").read_text())
    assert "ms for the NPU part (the CPU's part is not timed)" in page
    assert "On the CPU: 1 operator(s), 7,680 MACs" in page and "kernels in the runner's libraries: " in page
    assert "CPU time not estimated" in page


def test_layout_work_is_counted_from_velas_per_layer_report(tiny_sweep):
    rows = rows_of(tiny_sweep)
    mnist = rows["mnist", "ethos-u55-128"]
    with open(
        tiny_sweep / "results/vela/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/per_layer.csv"
    ) as f:
        layers = list(csv.DictReader(f))
    transposes = [layer for layer in layers if layer["NNG Operator"] == "Transpose"]
    cycles = sum(int(layer["Op Cycles"]) for layer in transposes)
    assert int(mnist["vela_transposes"]) == len(transposes) >= 1
    assert float(mnist["vela_transpose_cycles_pct"]) == pytest.approx(
        100 * cycles / int(mnist["vela_cycles_total"]), abs=0.01
    )
    page = tiny_sweep / "results/report/cells/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram.html"
    assert "Layout work on the NPU (Vela's per-layer report): " in html.unescape(page.read_text())


def test_what_to_pick_ranks_a_cell_with_cpu_work_after_one_whole_on_the_npu_and_never_says_it_meets_a_budget():
    base = {"model": "m", "status": "ok", "fit": "fits", "target": "ethos-u55-128"}
    whole = {**base, "memory_mode": "Sram_Only", "cpu_ops": "0", "vela_inference_ms": "3", "board_inference_ms": "3"}
    partly = {**base, "memory_mode": "Shared_Sram", "cpu_ops": "2", "cpu_macs": "9600"}
    partly |= {"vela_inference_ms": "1", "board_inference_ms": "1"}
    # the NPU part of a partly delegated cell is faster, but its CPU part is not timed
    pick = board_pick("m", [partly, whole], None)
    assert pick.row is whole and pick.text.startswith("fastest that fits: Sram_Only, 3 ms (Vela")
    assert bare_pick("m", [partly, whole], None).row is whole
    only_partly = board_pick("m", [partly], 2.0)
    assert "1 ms for the NPU part, plus the CPU's (2 operator(s), 9,600 MACs; CPU time not estimated)" in (
        only_partly.text
    )
    assert only_partly.verdict == "fits" and "its NPU part alone is within the 2 ms budget" in only_partly.text
    assert board_pick("m", [partly], 0.5).verdict == "misses budget"
    bare = bare_pick("m", [partly, whole], 2.0)
    assert bare.verdict == "fastest" and "the smallest NPU: ethos-u55-128 / Shared_Sram" in bare.text
    assert bare_pick("m", [partly, whole], 0.5).text.count("the closest misses it by 0.5 ms") == 1


def test_a_cpu_operator_without_a_kernel_compiles_and_says_it_will_not_load(tmp_path):
    """tests/models/no_kernel.py sorts its features: the sort stays on the CPU, and no kernel library
    the runner links implements aten::sort.values. The cell compiles and says it will not load, with
    the way round, in the summary, the terminal, the operator map and its page."""
    models = [{"name": "sorts", "file": "tests/models/no_kernel.py"}, {"name": "mnist", "file": "models/mnist.py"}]
    work, proc = swept(tmp_path, models, targets=["ethos-u55-128"])
    rows = rows_of(work)
    sorts = rows["sorts", "ethos-u55-128"]
    assert sorts["status"] == "will not load" and sorts["cpu_kernels_missing"] == "aten::sort.values"
    assert sorts["reason"].startswith(
        "compiled, will not load: no CPU kernel for aten::sort.values (keep it on the NPU (another target or "
        "TOSA profile), change the model to use another operator, or add a custom kernel to the runner)"
    )
    assert int(sorts["vela_cycles_total"]) > 0 and rows["mnist", "ethos-u55-128"]["status"] == "ok"
    assert "will not load: sorts [int8] ethos-u55-128 / Shared_Sram: compiled, will not load" in proc.stderr
    assert "1 of 2 cells ok" in proc.stderr
    with open(work / "results/operators.csv", newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r["where"] == "CPU, no kernel"]
    assert (row["operator"], row["held_back"], row["family"]) == ("aten::sort.values", "sorts", "Ethos-U55/U65")
    page = work / "results/report/cells/sorts/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram.html"
    assert "no kernel for aten::sort.values: the program will not load" in page.read_text()


def test_a_channels_last_export_drops_the_input_transposes_and_verifies(tmp_path):
    """`channels_last: true`: the model and its input exported in torch.channels_last. The NPU gets
    its input NHWC, Vela lists fewer transposes and fewer cycles, and the verify stage, running the
    partitions in the dim order the program holds them, finds the NPU path where the quantized model is."""
    from ethosweep.runtime.io import read_json
    from ethosweep.verify import chain

    layouts = {}
    for name, channels_last in (("nchw", False), ("nhwc", True)):
        folder = tmp_path / name
        chain.export(folder, {"name": name, "file": "tests/models/two_convs.py", "channels_last": channels_last})
        chain.quantize(folder, name)
        lowered = chain.lower(folder, name)
        chain.cell(lowered, folder)
        verified = chain.verify(folder, name, lowered)
        layouts[name] = (read_json(folder / "summary.json")["cell"], verified)
    (nchw, nchw_verified), (nhwc, nhwc_verified) = layouts["nchw"], layouts["nhwc"]
    assert nhwc["layout"]["transposes"] == nchw["layout"]["transposes"] - 2  # the input's, in and out of NHWC
    assert nhwc["cycles_total"] < nchw["cycles_total"]
    assert (nchw_verified["verdict"], nhwc_verified["verdict"]) == ("identical", "identical")
    assert nhwc_verified["metrics"]["max_error_steps"] == 0


def test_a_float_boundary_in_an_integer_partition_compiles_and_says_it_will_not_run(tmp_path):
    """tests/models/split_boundary.py is YOLO's C2PSA in miniature: a split whose one half passes the
    bmm the partitioner leaves on the CPU (int16 on Ethos-U55). ExecuTorch 1.5 leaves that half a
    float32 output of an int16 partition, a program the device rejects (pytorch/executorch#19364).
    The cell compiles and says it will not run, naming the line; its numerics say why they are
    unverified; on Ethos-U85 (bmm in int16 on the NPU) the same model is ok."""
    models = [{"name": "split", "file": "tests/models/split_boundary.py"}]
    work, proc = swept(tmp_path, models, targets=["ethos-u55-128", "ethos-u85-256"], quantization=["a16w8"])
    rows = rows_of(work)
    u55, u85 = rows["split", "ethos-u55-128"], rows["split", "ethos-u85-256"]
    assert u55["status"] == "will not run" and int(u55["vela_cycles_total"]) > 0
    assert u55["reason"].startswith("compiled, will not run: NPU output executorch_call_delegate[0] taken as float32")
    assert "given as int16" in u55["reason"] and "#19364" in u55["reason"]
    assert "split_boundary.py:17: a, b = self.cv1(x).split((8, 8), dim=1)" in u55["reason"]
    assert u55["numerics"] == "unverified"
    why = u55["numerics_reason"]
    assert "takes output 0 of NPU partition 0" in why and "While executing" not in why
    assert (u85["status"], u85["delegation"]) == ("ok", "full") and u85["numerics"] in PASSED
    assert "will not run: split [a16w8] ethos-u55-128 / Shared_Sram: compiled, will not run" in proc.stderr
    heading = "2 of 2 cells compiled</b> (1 will not run or load on the device)"
    assert heading in (work / "results/report/index.html").read_text()


class _CpuOperators(__import__("torch").nn.Module):
    """Every kind of compute the presets leave on the CPU, with shapes small enough to count by hand."""

    def __init__(self):
        import torch

        super().__init__()
        self.conv = torch.nn.Conv2d(8, 4, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.transposed = torch.nn.ConvTranspose2d(8, 4, 3, stride=2)
        self.linear = torch.nn.Linear(8, 5)

    def forward(self, x, q, k):
        import torch

        return (
            self.conv(x),  # 1x4x6x6 outputs x 8 inputs x 3x3: 1,152 x 9 = 10,368
            self.depthwise(x),  # 1x8x6x6 outputs x 1 input x 3x3: 2,592
            self.transposed(x),  # each of the 288 inputs to 4 outputs x 3x3 taps: 10,368
            torch.nn.functional.adaptive_avg_pool2d(x, 1),  # every input summed once: 288
            x.mean(dim=(2, 3)),  # 288
            torch.nn.functional.avg_pool2d(x, 2),  # 1x8x3x3 outputs x 2x2 window: 288
            self.linear(x.mean(dim=(2, 3))),  # the mean's 8 (counted above: 288) then 5 outputs x 8: 40
            q @ k.transpose(1, 2),  # 1x4x4 outputs x 16: 256
        )


def test_the_cpu_part_counts_each_operators_multiply_accumulates_as_by_hand():
    """cpu_macs on the operators the presets leave on the CPU (a global pool, a mean, a transposed
    convolution among them), in the exported graph and in the edge graph the lowering counts on."""
    import torch
    from executorch.exir import to_edge

    from ethosweep.compile.delegation import cpu_macs

    inputs = (torch.rand(1, 8, 6, 6), torch.rand(1, 4, 16), torch.rand(1, 4, 16))
    exported = torch.export.export(_CpuOperators().eval(), inputs)
    by_hand = 10_368 + 2_592 + 10_368 + 288 + 288 + 288 + 288 + 40 + 256
    assert cpu_macs(exported.graph) == by_hand
    assert cpu_macs(to_edge(exported).exported_program().graph) == by_hand
