"""The numerics verdicts on a zoo nobody here wrote: torchvision classifiers with random weights.

    uv run python perf/zoo_numerics.py                        # the models below, U55 and U85 profiles
    uv run python perf/zoo_numerics.py --models resnet18 --profiles u55
    uv run python perf/zoo_numerics.py --smoke    # squeezenet1_1 at 64x64 on the U55 profile (the tests)

Each model goes through the stages' own functions (export, quantize, lower to TOSA, verify) at
96x96, calibrated on its example input as a model without a dataset is, and the verify stage's
verdict, reason and (if flagged) layer are printed, with the time each took. Every `flagged`
must be explained by the layer it names (the run fails if one is not); the closing lines count
the verdicts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

MODELS = ("resnet18", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet0_5", "regnet_x_400mf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--profiles", nargs="+", default=["u55", "u85"], choices=["u55", "u85"])
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--smoke", action="store_true", help="squeezenet1_1 at 64x64 on the U55 profile")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.models, args.profiles, args.size = ["squeezenet1_1"], ["u55"], 64

    from ethosweep.verify import chain

    verdicts: Counter = Counter()
    unexplained = []
    for name in args.models:
        model = {
            "name": name,
            "import": f"torchvision.models:{name}",
            "kwargs": {},
            "inputs": [{"shape": [1, 3, args.size, args.size], "dtype": "float32", "range": [0, 1]}],
        }
        with tempfile.TemporaryDirectory(prefix="ethosweep-zoo-") as tmp:
            d = args.workdir / name if args.workdir else Path(tmp)
            started = time.perf_counter()
            chain.export(d, model)
            for profile in args.profiles:
                t = time.perf_counter()
                chain.quantize(d, profile, profile=profile)
                lowered = chain.lower(d, profile)
                record = chain.verify(d, profile, lowered)
                verdicts[record["verdict"]] += 1
                if record["verdict"] == "flagged" and not record["layer"]:
                    unexplained.append(f"{name} {profile}")
                layers = (record.get("location") or {}).get("layers") or []
                worst_own = max((layer["own_steps"] for layer in layers), default=None)
                partitions = len(list((lowered / "tosa").glob("*.tosa")))
                print(
                    f"{name:<20} {profile}  {partitions} partition(s)  {record['verdict']:<12} "
                    f"max {record['metrics'].get('max_error_steps')} steps"
                    + (f" (worst layer on its own: {worst_own})" if worst_own is not None else "")
                    + f"  {time.perf_counter() - t:.0f} s",
                    flush=True,
                )
                print(
                    f"    {record['reason'] or 'no note'}" + (f" [layer {record['layer']}]" if record["layer"] else ""),
                    flush=True,
                )
            print(f"    ({time.perf_counter() - started:.0f} s in all)", flush=True)
    print(", ".join(f"{count} {verdict}" for verdict, count in verdicts.most_common()))
    if unexplained:
        print("FLAGGED WITHOUT A LAYER: " + ", ".join(unexplained))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
