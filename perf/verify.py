"""Cost of verifying one cell's numerics: the seed MNIST CNN trained on digits, int8, Ethos-U55 profile.

    uv run python perf/verify.py [--samples 500]
    uv run python perf/verify.py --smoke          # 100 samples (the tests run this)

Prints the time of each part of the verify stage (loading the lower stage's edge program, the
float, quantized and TOSA-reference runs over the held-out samples) and the verdict, in one
process, so that the figure is the stage's own cost (no interpreter start, no torch import).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=500)
    # the smoke run evaluates as many samples as a verdict needs: 100 cannot show a classifier's top-1
    # within 1 point (the interval is about +-3.7 points), 500 of the 539 held out can (+-0.8)
    parser.add_argument("--smoke", action="store_true", help="the same steps, the default number of samples")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here (default: a temp dir)")
    args = parser.parse_args(argv)
    samples = 500 if args.smoke else args.samples

    started = time.perf_counter()
    # every stage's imports first, timed on their own: the verify figure is the stage's own work
    import ethosweep.compile.lower  # noqa: F401
    import ethosweep.compile.quantize  # noqa: F401
    import ethosweep.verify.numerics  # noqa: F401
    import ethosweep.zoo.train  # noqa: F401
    from ethosweep.verify import chain

    print(f"imports: {time.perf_counter() - started:.1f} s")
    model = {"name": "mnist_digits", "file": "models/mnist.py"}
    with tempfile.TemporaryDirectory() as tmp:
        d = args.workdir or Path(tmp)
        t = time.perf_counter()
        weights = chain.train(d, model, "digits", {"epochs": 12, "lr": 0.002, "batch_size": 64})
        chain.export(d, model, weights=weights)
        chain.quantize(d, "q", dataset="digits")
        lowered = chain.lower(d, "q")
        print(f"train + export + quantize + lower (setup, not timed below): {time.perf_counter() - t:.1f} s")

        t = time.perf_counter()
        record = chain.verify(d, "q", lowered, dataset="digits", evaluation_samples=samples)
        total = time.perf_counter() - t
    loaded = record["seconds"]["load"]
    print(
        f"verify one (model, scheme, profile), {record['samples']} held-out samples: {total:.1f} s "
        f"(loading {loaded:.1f} s, evaluation {total - loaded:.1f} s, "
        f"{1000 * (total - loaded) / record['samples']:.1f} ms per sample)"
    )
    m = record["metrics"]
    print(
        f"top-1 float {m['top1_float']:.3f}, quantized {m['top1_quantized']:.3f}, NPU (TOSA) {m['top1_npu']:.3f}; "
        f"max error {m['max_error_steps']:g} steps"
    )
    from ethosweep.verify.verdicts import PASSED

    quantization = record["quantization"]
    print(f"NPU vs quantized: {record['verdict']}" + (f" ({record['reason']})" if record["reason"] else ""))
    print(
        f"quantized vs float: {quantization['verdict']}"
        + (f" ({quantization['reason']})" if quantization["reason"] else "")
    )
    # the trained digits model is the sweep's reference for a passed verdict on both questions (docs/numerics.md)
    return 0 if record["verdict"] in PASSED and quantization["verdict"] in PASSED else 1


if __name__ == "__main__":
    sys.exit(main())
