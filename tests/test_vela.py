"""Vela's reports: parsing real recorded output and combining partitions."""

from pathlib import Path

import pytest

from ethosweep.vela.compile import aggregate, mac_utilisation, read_per_layer, read_summary

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
