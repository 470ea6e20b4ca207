"""The operator map on the tiny sweep's real lowerings: what runs where, and what holds models back."""

from __future__ import annotations

import csv

from ethosweep.results.operators import format_top, vela_rejection_rows, way_round


def read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_operator_map_names_what_holds_models_back_and_the_way_round(tiny_sweep):
    rows = read(tiny_sweep / "results/operators.csv")
    # DS-CNN's 24x5 average pool with padding stays on the CPU on Ethos-U55/U65: the only row holding a model back
    first = rows[0]
    assert (first["operator"], first["family"], first["scheme"], first["where"]) == (
        "avg_pool2d",
        "Ethos-U55/U65",
        "int8",
        "CPU",
    )
    assert (first["models_held_back"], first["held_back"]) == ("1", "ds_cnn")
    assert first["reason"] == "Avgpool2d with padding needs kernel dims < 8, got [24, 5]"
    assert first["way_round"].startswith("Ethos-U55/U65 pool with padding up to 8x8")
    assert all(r["models_held_back"] == "0" for r in rows[1:])
    conv = next(r for r in rows if (r["operator"], r["family"]) == ("convolution", "Ethos-U55/U65"))
    assert conv["where"] == "NPU" and int(conv["models_on_npu"]) == 3  # mnist, ds_cnn, mnist_digits
    assert format_top(rows) == [
        "avg_pool2d on Ethos-U55/U65 [int8]: held back 1 model(s) (ds_cnn): Avgpool2d with padding needs kernel "
        "dims < 8, got [24, 5] -> " + first["way_round"]
    ]


def test_each_models_share_on_the_npu_and_its_hand_overs(tiny_sweep):
    models = {(r["model"], r["family"]): r for r in read(tiny_sweep / "results/operator_models.csv")}
    ds_cnn = models["ds_cnn", "Ethos-U55/U65"]
    # NPU -> CPU (the average pool) -> NPU: two hand-overs; the pool's window sums count as accumulates:
    # 64 channels x one 24x5 window
    assert (ds_cnn["delegated"], ds_cnn["partitions"], ds_cnn["npu_cpu_switches"]) == ("partial", "2", "2")
    assert ds_cnn["npu_macs"] == "2656768" and ds_cnn["cpu_macs"] == str(64 * 24 * 5)
    assert ds_cnn["npu_mac_share_pct"] == str(round(100 * 2656768 / (2656768 + 64 * 24 * 5), 1))
    mnist = models["mnist", "Ethos-U55/U65"]
    assert (mnist["delegated"], mnist["npu_cpu_switches"], mnist["npu_macs"]) == ("full", "0", "1135872")


def test_the_report_shows_the_operator_map(tiny_sweep):
    index = (tiny_sweep / "results/report/index.html").read_text()
    section = index[index.index('id="operators"') :]
    assert "Avgpool2d with padding needs kernel dims &lt; 8, got [24, 5]" in section
    # the default config opens on what to pick; the zoo presets on the operator map
    assert index.index('id="pick"') < index.index('id="operators"')


def test_a_way_round_is_only_given_for_the_limit_it_is_known_for():
    assert way_round("Avgpool2d with padding needs kernel dims < 8, got [24, 5]", "u55").startswith("Ethos-U55")
    assert way_round("Avgpool2d with padding needs kernel dims < 8, got [24, 5]", "u85") == ""
    assert way_round("some other reason", "u55") == ""


def test_the_int16_matmul_limit_seen_in_the_attention_preset():
    # recorded: config/zoos/attention.yaml, a16w8, the attention's bmm on the u55 profile
    reason = (
        "Input quantized_decomposed_dequantize_per_tensor_default_157 has unsupported dtype torch.int16 "
        "(Supports int8)."
    )
    assert way_round(reason, "u55").startswith("Ethos-U55/U65 take this operator with int8 inputs only")
    assert way_round(reason, "u85") == ""
    follower = "Was first node in partition and input aten_slice_copy_tensor_5 had fp dtype."
    assert way_round(follower, "u55").startswith("a consequence: the operator before it stays on the CPU")


def test_what_vela_refuses_after_the_partitioner_delegated_it_is_a_row_of_its_own():
    # the reason the mobile_classifiers preset's a16w8 cells on Ethos-U55/U65 failed with (Vela 5.1.0)
    reason = (
        "vela: Vela failed on partition 0: Non-passthrough operation (Conv2D) could not run on NPU "
        "(reproducer: results/vela/{model}/a16w8/{target}/Shared_Sram/repro/)"
    )
    failed = [
        {"model": m, "quantization": "a16w8", "target": t, "reason": reason.format(model=m, target=t)}
        for m in ("mobilenet_v2", "mnasnet0_5")
        for t in ("ethos-u55-128", "ethos-u65-256")
    ]
    failed.append({"model": "resnet18", "quantization": "int8", "target": "ethos-u85-256", "reason": "export: boom"})
    compiled = {(m, q, p) for m in ("mobilenet_v2", "mnasnet0_5") for q, p in (("int8", "u55"), ("a16w8", "u85"))}
    (row,) = vela_rejection_rows(failed, compiled)  # one row: the export failure is not Vela's
    assert (row["operator"], row["family"], row["scheme"], row["where"]) == (
        "Conv2D (in Vela)",
        "Ethos-U55/U65",
        "a16w8",
        "rejected by Vela",
    )
    assert (row["models_held_back"], row["held_back"]) == (2, "mnasnet0_5 mobilenet_v2")
    assert row["reason"] == (
        "delegated by the partitioner, then refused by Vela: Non-passthrough operation (Conv2D) could not run on NPU"
    )
    assert row["way_round"] == "in this sweep these models compile as int8 on Ethos-U55/U65 and as a16w8 on Ethos-U85"
    # what was not seen to compile is not suggested
    (row,) = vela_rejection_rows(failed, {("mobilenet_v2", "int8", "u55")})
    assert row["way_round"] == ""


def test_a_tosa_profiles_name_is_not_a_limit_and_no_cell_is_told_to_do_what_it_does():
    # recorded: torch.where on a mask, int8, Ethos-U55 (the partitioner's own words)
    reason = "Had torch.bool input that is not supported by TOSA-1.0+INT+int16+int4+u55"
    assert "int16 implementation" not in way_round(reason, "u55", "int8")
    assert way_round(reason, "u55", "int8").startswith("a boolean operand (a mask from a comparison)")
    # the int16 limits advise int8 to a16w8 cells only
    int16 = "Input x has unsupported dtype torch.int16 (Supports int8)."
    assert way_round(int16, "u55", "int8") == "" and way_round(int16, "u55", "a16w8").startswith("Ethos-U55/U65 take")
