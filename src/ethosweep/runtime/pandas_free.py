"""Snakemake without pandas, where no data frame is in play.

pandas is installed beside Snakemake here (the report's tables use it), and Snakemake 9 then
imports it at every start that compares params (about half a CPU-second, a fifth of a no-op run),
twice over: validate() imports it to ask whether the config is a data frame, and the params rerun
trigger to ask whether a rule's params are. A config is a dict and our params are builtins; and no
value can be a pandas object while pandas has not been imported. So validate() runs with pandas
hidden (its import raises ImportError, which validate() takes as "no data frame"), and a param is
serialized without pandas until something has imported it. Applied only while Snakemake still has
what this replaces.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


@contextlib.contextmanager
def hidden() -> Iterator[None]:
    """`import pandas` raises ImportError inside, unless pandas is imported already."""
    if "pandas" in sys.modules:
        yield
        return
    sys.modules["pandas"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.modules.pop("pandas", None)


def params_without_pandas() -> bool:
    """Patch the params rerun trigger for this process; False (nothing changed) where this
    Snakemake's persistence does not serialize params as described above."""
    try:
        from snakemake.persistence import PersistenceBase as Persistence
    except ImportError:
        return False
    original = Persistence.__dict__.get("_serialize_param_pandas")
    if original is None or not hasattr(Persistence, "_serialize_param_builtin"):
        return False
    if getattr(original, "_ethosweep", False):
        return True

    def _serialize_param_pandas(self, value):
        if "pandas" not in sys.modules:  # no pandas object can exist yet
            return self._serialize_param_builtin(value)
        return original(self, value)

    _serialize_param_pandas._ethosweep = True
    Persistence._serialize_param_pandas = _serialize_param_pandas
    return True
