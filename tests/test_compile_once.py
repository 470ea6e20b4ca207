"""One lowering per (model, scheme, TOSA profile), Vela per cell: the same bytes as the full flow.

The reference is what ethosweep did before compile-once, and what aot_arm_compiler does for one
cell: to_edge_transform_and_lower with the cell's own EthosUPartitioner (Vela inside), the
cortex_m quantize pass, to_executorch. The cell's .pte from the vela stage, built from the
profile's template with Vela run separately (and with --verbose-performance added for its
reports), must be byte-identical to it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ethosweep.compile.artifacts import load_quantized
from ethosweep.compile.compile_spec import ethosu_compile_spec
from ethosweep.runtime.io import read_json
from ethosweep.verify import chain


def reference_pte(
    quantized: Path, target: str, system_config: str, memory_mode: str, vela: dict, additional_checks=None
) -> bytes:
    """The full flow for one cell: partitioning, TOSA and Vela inside ExecuTorch's lowering
    (`additional_checks`: the partitioner's operator-support checks, as its users pass them)."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.backends.cortex_m.passes.replace_quant_nodes_pass import ReplaceQuantNodesPass
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    spec = ethosu_compile_spec(target, system_config, memory_mode, vela)
    edge = to_edge_transform_and_lower(
        load_quantized(quantized),
        partitioner=[
            EthosUPartitioner(spec, additional_checks=additional_checks)
            if additional_checks
            else EthosUPartitioner(spec)
        ],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    edge = edge.transform([ReplaceQuantNodesPass()])
    return bytes(edge.to_executorch(config=ExecutorchBackendConfig(extract_delegate_segments=False)).buffer)


CASES = [
    # a model Ethos-U55 splits into two partitions around an average pool it cannot run
    ("ds_cnn", "u55", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", {}),
    # a two-input model, on the U85 family
    ("add", "u85", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only", {}),
    # the U65 family from the U55 profile's lowering, in a dedicated-SRAM mode
    ("mnist", "u55", "ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB", {}),
    # another U55 size and system config, with non-default Vela options
    (
        "mnist",
        "u55",
        "ethos-u55-64",
        "Ethos_U55_Deep_Embedded",
        "Sram_Only",
        {"optimise": "Size", "arena_cache_size": 200000},
    ),
    # another U85 size than the profile's representative, another system config
    ("mnist", "u85", "ethos-u85-512", "Ethos_U85_SYS_DRAM_High", "Dedicated_Sram_512KB", {}),
]


@pytest.mark.parametrize(
    "model, profile, target, system_config, memory_mode, vela",
    CASES,
    ids=[f"{c[0]}-{c[2]}-{c[4]}{'-options' if c[5] else ''}" for c in CASES],
)
def test_a_cells_pte_is_byte_identical_to_the_full_lowering(
    tiny_sweep, tmp_path, model, profile, target, system_config, memory_mode, vela
):
    lowered = tiny_sweep / "results/lower" / model / "int8" / profile
    record = chain.cell(lowered, tmp_path, target, system_config, memory_mode, vela=vela)
    quantized = tiny_sweep / "results/quantize" / model / "int8" / profile / "quantized.pt2"
    expected = reference_pte(quantized, target, system_config, memory_mode, vela)
    ours = (tmp_path / "model.pte").read_bytes()
    assert len(ours) == len(expected) and ours == expected
    # Vela's reports come from the same run, for every partition
    summary = read_json(tmp_path / "summary.json")
    assert (
        len(summary["partitions"]) == len(record["partitions"]) == len(read_json(lowered / "lower.json")["partitions"])
    )
    assert summary["cell"]["accelerator_configuration"] == "Ethos_" + target.removeprefix("ethos-").upper().replace(
        "-", "_"
    )
    assert summary["cell"]["memory_mode"] == memory_mode
    assert not (tmp_path / "repro").exists()


def test_the_lowering_does_not_depend_on_the_target_within_a_profile(tiny_sweep):
    """What compile-once rests on: the quantized program and the TOSA of U55 and U65 cells come
    from one lowering, and the summary checks every cell's TOSA against the verified one."""
    lowered = read_json(tiny_sweep / "results/lower/mnist/int8/u55/lower.json")
    verified = read_json(tiny_sweep / "results/verify/mnist/int8/u55/verify.json")
    assert [p["tosa_sha256"] for p in lowered["partitions"]] == [p["tosa_sha256"] for p in verified["tosa_partitions"]]
    cell = read_json(
        tiny_sweep / "results/vela/mnist/int8/ethos-u55-128/Ethos_U55_High_End_Embedded/Shared_Sram/compile.json"
    )
    assert cell["template_sha256"] == lowered["template_sha256"]
    assert [p["tosa_sha256"] for p in cell["partitions"]] == [p["tosa_sha256"] for p in lowered["partitions"]]


@pytest.mark.parametrize(
    "keep", [{"node": "aten_convolution_default_1"}, {"module": "conv2"}], ids=["by-node-name", "by-module-path"]
)
def test_keep_on_cpu_lowers_as_executorchs_own_operator_support_checks(tiny_sweep, tmp_path, keep):
    """`keep_on_cpu` keeps a named layer on the CPU: the cell's .pte is byte-identical to the full
    flow with ExecuTorch's own DontPartitionName (a node) or DontPartitionModule (a module path)."""
    from executorch.exir.backend.operator_support import DontPartitionModule, DontPartitionName

    from ethosweep.verify.chain import lower

    quantized = tiny_sweep / "results/quantize/mnist/int8/u55/quantized.pt2"
    shutil.copy(quantized, tmp_path / "mnist.pt2")
    lowered = lower(tmp_path, "mnist", keep_on_cpu=[keep], into="lowered")
    record = read_json(lowered / "lower.json")
    # the second convolution stays on the CPU, between two partitions
    table = read_json(lowered / "delegation.json")
    assert record["delegated"] == "partial" and table["partitions"] == 2
    # (with its ReLU, which the partitioner fuses with it, and its weights' dequantize)
    assert table["cpu_operators"]["aten_convolution_default"] == 1 and "aten_relu_default" in table["cpu_operators"]
    chain.cell(lowered, tmp_path)
    check = DontPartitionName(keep["node"]) if "node" in keep else DontPartitionModule(instance_name=keep["module"])
    expected = reference_pte(
        quantized, "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", {}, additional_checks=[check]
    )
    ours = (tmp_path / "model.pte").read_bytes()
    # The same program (every field, every delegate's Vela command stream and weights). Its bytes
    # are those of ExecuTorch's program after ExecuTorch's own deserialise-serialise round trip:
    # with a convolution on the CPU, to_executorch's serialiser writes a default-valued field of
    # its kernel call that the round trip (which the vela stage's assembly is) leaves out.
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    assert deserialize_pte_binary(ours).program == deserialize_pte_binary(expected).program
    assert ours == bytes(serialize_pte_binary(deserialize_pte_binary(expected)))
    assert len(ours) == len(expected)
