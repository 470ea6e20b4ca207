"""Can the runner run what a program leaves on the CPU? Its operators, looked up in the kernel
libraries the Arm bare-metal runner links.

An ExecuTorch program names every operator it runs outside its delegates in its execution plan
("aten::avg_pool2d" overload "out"). A bare-metal runner registers kernels from ExecuTorch's kernel
libraries, selected for the operators the program needs: the portable kernels, the quantized kernels
and the Cortex-M (CMSIS-NN) kernels (ethosweep's own runner links exactly these three,
firmware/runner/CMakeLists.txt). An operator none of them implements makes the program fail at load
on the board ("kernel 'aten::exp.out' not found", pytorch/executorch#13399). The libraries' operator
lists ship in the wheel (the yaml files their kernels are generated from), so the check needs no SDK.
Torch-free (the summary and the operator map use it): the vela stage reads a program's operators.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

# The kernel libraries a runner links, by the yaml files (in the executorch package) their kernel
# registrations are generated from (firmware/runner/CMakeLists.txt names the same files).
LIBRARIES = {
    "portable": (
        "kernels/portable/functions.yaml",
        "kernels/portable/custom_ops.yaml",
        "kernels/portable/et_copy_ops.yaml",
    ),
    "quantized": ("kernels/quantized/quantized.yaml",),
    "cortex_m": ("backends/cortex_m/ops/operators.yaml",),
}
# What to do about an operator without a kernel, in the words of the sweep's users.
WAY_ROUND = (
    "keep it on the NPU (another target or TOSA profile), change the model to use another operator, "
    "or add a custom kernel to the runner"
)


def executorch_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=None)
def kernel_libraries(root: str | None = None) -> dict[str, str]:
    """{'aten::avg_pool2d.out': 'portable', 'cortex_m::quantize_per_tensor.out': 'cortex_m', ...}: every
    operator a library the runner links has a kernel for (the first library that lists it)."""
    base = Path(root) if root else executorch_dir()
    found: dict[str, str] = {}
    for library, files in LIBRARIES.items():
        for name in files:
            path = base / name
            if path.is_file():
                for operator in operators_in(path.read_text()):
                    found.setdefault(operator, library)
    return found


def operators_in(yaml_text: str) -> list[str]:
    """The operators a kernel yaml lists: `- op: exp.out` (an ATen operator) or `- func:
    cortex_m::quantize_per_tensor.out(Tensor input, ...)` (a namespaced schema)."""
    found = []
    for kind, value in re.findall(r"^- (op|func):\s*([^\s(]+)", yaml_text, re.M):
        found.append(value if "::" in value else f"aten::{value}")
    return found


def check_kernels(operators: list[str], libraries: dict[str, str] | None = None) -> dict:
    """{"kernels": {operator: library}, "missing": [operators no library has]} for a program's operators."""
    libraries = kernel_libraries() if libraries is None else libraries
    kernels = {op: libraries[op] for op in operators if op in libraries}
    return {"kernels": kernels, "missing": [op for op in operators if op not in libraries]}


def will_not_load(missing: list[str]) -> str:
    """'compiled, will not load: no CPU kernel for aten::exp.out (keep it on the NPU, ...)', or ''."""
    if not missing:
        return ""
    return f"compiled, will not load: no CPU kernel for {', '.join(missing)} ({WAY_ROUND})"
