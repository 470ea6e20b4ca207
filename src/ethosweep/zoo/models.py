"""Loading the models of the zoo: model files and import paths.

Model files follow the convention of ExecuTorch's aot_arm_compiler: a Python
file with module-level `ModelUnderTest` (an nn.Module) and `ModelInputs` (a
tuple of example inputs). Import-path models are `package.module:Callable`
returning an nn.Module, with input shapes from the config.

Model files are Python code: loading one runs it with the user's rights.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

from ethosweep.matrix.models import InputSpec, ModelSpec
from ethosweep.runtime.activity import running
from ethosweep.runtime.errors import Fault, StageError, of_the_machine
from ethosweep.zoo.inputs import random_inputs_like

_DTYPES = {
    "float32": torch.float32,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}


class ModelError(StageError):
    """A model that cannot be loaded or run; the message names the model and the cause."""

    fault = Fault.MODEL


def raised(error: BaseException) -> str:
    """'raised ValueError: ...', or 'called sys.exit(3)': what a model's code did, in words."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    return f"raised {type(error).__name__}: {error}"


def source_digest(spec: ModelSpec, base_dir: str | Path = ".") -> str | None:
    """sha256 of a model file (None for import-path models)."""
    if spec.file is None:
        return None
    return hashlib.sha256((Path(base_dir) / spec.file).read_bytes()).hexdigest()


def load_model(spec: ModelSpec, seed: int, base_dir: str | Path = ".") -> tuple[torch.nn.Module, tuple]:
    """The model in eval mode and its example inputs, reproducibly seeded.

    The seed is set before the model is built so that random weights (Vela's
    cycle counts depend on weight values) are the same in every run.
    """
    torch.manual_seed(seed)
    if spec.file is not None:
        model, inputs = _load_file(spec, Path(base_dir) / spec.file)
    else:
        model = _load_import(spec)
        inputs = make_inputs(spec.inputs, seed)
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"model '{spec.name}' ({spec.source}): expected a torch.nn.Module, got {type(model).__name__}")
    check_inputs(f"model '{spec.name}' ({spec.source})", inputs)
    if spec.channels_last:
        return model.eval().to(memory_format=torch.channels_last), channels_last(inputs)
    return model.eval(), inputs


def channels_last(inputs: tuple) -> tuple:
    """The 4-D tensors of `inputs` in torch.channels_last (a model exported so: its program holds them NHWC)."""
    return tuple(
        t.contiguous(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4 else t
        for t in inputs
    )


def check_inputs(where: str, inputs: tuple) -> None:
    """Example inputs every later stage can use: tensors with elements and, where floating point,
    finite values (a zero-element input otherwise compiles, then fails in calibration or
    verification far from its cause)."""
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            continue
        shape = list(value.shape)
        if value.numel() == 0:
            raise ModelError(f"{where}: example input {index} has no elements (shape {shape})")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int((~torch.isfinite(value)).sum())
            raise ModelError(f"{where}: example input {index} holds {bad} NaN or infinite value(s) (shape {shape})")


def make_inputs(specs: tuple[InputSpec, ...], seed: int) -> tuple[torch.Tensor, ...]:
    """Example inputs drawn uniformly from each spec's range with their own generator."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype = _DTYPES[spec.dtype]
        if dtype.is_floating_point:
            t = torch.rand(spec.shape, generator=generator) * (spec.high - spec.low) + spec.low
        elif dtype is torch.bool:
            t = torch.rand(spec.shape, generator=generator) < 0.5
        else:
            t = torch.randint(int(spec.low), max(int(spec.high), int(spec.low) + 1), spec.shape, generator=generator)
        tensors.append(t.to(dtype))
    return tuple(tensors)


def _load_file(spec: ModelSpec, path: Path) -> tuple[Any, tuple]:
    where = f"model '{spec.name}' ({spec.file})"
    if not path.is_file():
        raise ModelError(f"{where}: file not found")
    module_name = f"ethosweep_model_{spec.name.replace('-', '_')}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    # modules beside the file import as they would for `python <file>` (they are inputs of its
    # jobs too: ethosweep.runtime.packages.local_modules)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        # named, so that a crash or an exit in the file's own code says which file
        with running(where, "importing its file"):
            module_spec.loader.exec_module(module)
    except SyntaxError as error:
        raise ModelError(f"{where}: syntax error at line {error.lineno}: {error.msg}") from error
    except (Exception, SystemExit) as error:
        raise ModelError(f"{where}: running the file {raised(error)}") from error
    missing = [n for n in ("ModelUnderTest", "ModelInputs") if not hasattr(module, n)]
    if missing:
        raise ModelError(
            f"{where}: the file defines no {' and no '.join(missing)}; a model file must define "
            "module-level ModelUnderTest (an nn.Module) and ModelInputs (a tuple of example inputs)"
        )
    model = module.ModelUnderTest
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        model = model()
    inputs = module.ModelInputs
    if not isinstance(inputs, tuple):
        raise ModelError(
            f"{where}: ModelInputs must be a tuple of example inputs, got {type(inputs).__name__} "
            "(write `ModelInputs = (x,)` for a single input)"
        )
    return model, inputs


# ethosweep's own model modules that configs name, where they were before the zoo had a room of its own
MOVED = {"ethosweep.compile.deployable": "ethosweep.zoo.deployable"}


def _load_import(spec: ModelSpec) -> Any:
    where = f"model '{spec.name}' ({spec.import_path})"
    module_name, _, attr = spec.import_path.partition(":")
    try:
        with running(where, f"importing {module_name}"):
            module = importlib.import_module(module_name)
    except ImportError as error:
        moved = MOVED.get(module_name)
        hint = f" (it moved: import: {moved}:{attr})" if moved else _install_hint(error)
        raise ModelError(f"{where}: import path does not resolve: {error}{hint}") from error
    except (Exception, SystemExit) as error:
        raise ModelError(f"{where}: importing {module_name} {raised(error)}") from error
    factory = getattr(module, attr, None)
    if factory is None:
        raise ModelError(f"{where}: module {module_name} has no attribute {attr!r}")
    try:
        with running(where, f"calling {attr}(**{spec.kwargs})"):
            return factory(**spec.kwargs)
    except (Exception, SystemExit) as error:
        raise ModelError(f"{where}: calling {attr}(**{spec.kwargs}) {raised(error)}{_install_hint(error)}") from error


def _install_hint(error: BaseException) -> str:
    """How to install a missing package that one of ethosweep's optional extras provides (a zoo
    preset's ultralytics or timm), or ''."""
    from ethosweep.runtime.packages import extra_providing

    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    extra = extra_providing(missing) if missing else None
    return f" (ethosweep's optional '{extra}' packages have it: run with `uv run --extra {extra} ...`)" if extra else ""


# BatchNorm statistics re-estimated on this many seeded inputs: a cumulative average (momentum None),
# so every input weighs the same; a random network's per-channel means and variances settle
# within a few dozen samples (each a whole feature map: N x H x W values a channel).
BATCHNORM_SAMPLES = 32


def initialise(module: torch.nn.Module, init: dict, example_inputs: tuple, seed: int) -> str:
    """Set the model's state as `init` asks before export; what was done, in one line ('' for nothing).

    `batchnorm: calibrate`: every BatchNorm's running mean and variance re-estimated on the example
    inputs and seeded random inputs in their value range (what the verify stage evaluates a model
    without data on), the rest of the model left in eval mode (dropout off), then eval again.
    `reparameterize: true`: then the model's re-parameterisable blocks fused as it is deployed."""
    done = [_calibrate_batchnorm(module, example_inputs, seed)] if init.get("batchnorm") == "calibrate" else []
    if init.get("reparameterize"):
        done.append(_reparameterize(module))
    return "; ".join(done)


def _reparameterize(module: torch.nn.Module) -> str:
    """Fuse MobileOne/RepViT-style branches (and batch-normed linears) into the layers inference runs,
    by timm's reparameterize_model: each module's own `reparameterize`, `fuse` or `switch_to_deploy`."""
    try:
        from timm.utils.model import reparameterize_model
    except ImportError as error:
        raise StageError(
            f"init reparameterize: needs timm ({error}); ethosweep's optional 'zoos' packages have it: run "
            "with `uv run --extra zoos ...`"
        ) from error
    before = sum(1 for _ in module.modules())
    fused = reparameterize_model(module, inplace=True)
    if fused is not module:
        raise StageError("init reparameterize: timm returned another module; the model cannot be fused in place")
    return f"re-parameterised for inference: {before} modules fused into {sum(1 for _ in module.modules())}"


def _calibrate_batchnorm(module: torch.nn.Module, example_inputs: tuple, seed: int) -> str:
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return "batchnorm: calibrate asked, but the model has no BatchNorm"
    samples = [example_inputs, *random_inputs_like(example_inputs, BATCHNORM_SAMPLES - 1, seed + 2)]
    module.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
        norm.train()
    how = f"on {BATCHNORM_SAMPLES} inputs in the input range, in one batch"
    try:
        with torch.no_grad():
            # one batch of them: a BatchNorm after the last pooling sees one value per channel per
            # sample, which training mode cannot normalise on its own
            module(*(torch.cat(parts) for parts in zip(*samples)))
    except Exception as error:  # noqa: BLE001 - a model written for batch 1: one sample at a time
        if of_the_machine(error):  # out of memory on the batch: not another export, a failure to retry
            raise
        for norm in norms:
            norm.reset_running_stats()
        # other statistics than the batch's (each input's variance, not the batch's): said in the record
        how = (
            f"on {BATCHNORM_SAMPLES} inputs in the input range, one at a time (the model does not run on a "
            f"batch: {type(error).__name__}: {' '.join(str(error).split())[:120]})"
        )
        try:
            with torch.no_grad():
                for sample in samples:
                    module(*sample)
        except Exception as error:
            raise StageError(
                f"init batchnorm: calibrate could not run the model in training mode ({type(error).__name__}: "
                f"{error}); leave `init` out for this model"
            ) from error
    module.eval()
    return f"{len(norms)} BatchNorm layers' statistics re-estimated {how}"
