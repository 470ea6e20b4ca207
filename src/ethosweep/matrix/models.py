"""A model of the zoo as the matrix names it: where its code is, its inputs, its data.

Torch-free and free of the matrix expansion: the stages that load a model (train, export)
depend on this, not on the config or the boards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0

    def as_params(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "range": [self.low, self.high]}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    file: str | None = None
    import_path: str | None = None
    kwargs: dict = field(default_factory=dict, hash=False)
    inputs: tuple[InputSpec, ...] = ()
    dataset: Any = field(default=None, hash=False)  # "digits" or {"path": ...}
    train: dict | None = field(default=None, hash=False)  # epochs, lr, batch_size
    classifier: bool | None = None  # None: labelled data decides (ethosweep.verify.verdicts)
    reads: tuple[str, ...] = ()  # files the model's code reads (weights, labels): its export's inputs
    # how the model's state is set before export, beyond what its code does: {"batchnorm": "calibrate"}
    init: dict = field(default_factory=dict, hash=False)
    # operators the partitioner leaves on the CPU: ({"module": ...} | {"node": ...} | {"operator": ...}, ...)
    keep_on_cpu: tuple = ()
    # exported in torch.channels_last (the module and its 4-D inputs): no input TRANSPOSE on the NPU
    channels_last: bool = False
    # what the model is for (classification, detection, ...): how the report and `picks` group it
    task: str | None = None

    @property
    def source(self) -> str:
        return self.file if self.file is not None else self.import_path

    def as_params(self) -> dict[str, Any]:
        """Everything about the model a job depends on besides the file's bytes."""
        return {
            "name": self.name,
            "file": self.file,
            "import": self.import_path,
            "kwargs": dict(self.kwargs),
            "inputs": [i.as_params() for i in self.inputs],
            # only when set: a model without it keeps the params (and the outputs) it always had
            **({"init": dict(self.init)} if self.init else {}),
            **({"channels_last": True} if self.channels_last else {}),
        }


def model_spec_from_params(params: dict) -> ModelSpec:
    """Rebuild a ModelSpec from the plain dict a rule passes as a param."""
    return ModelSpec(
        name=params["name"],
        file=params.get("file"),
        import_path=params.get("import"),
        kwargs=dict(params.get("kwargs") or {}),
        inputs=tuple(InputSpec(tuple(i["shape"]), i["dtype"], *i["range"]) for i in params.get("inputs", [])),
        init=dict(params.get("init") or {}),
        channels_last=bool(params.get("channels_last")),
    )
