"""How heavy a report is and how fast it opens: page weight, first paint and the table ready, in headless Chromium.

    uv run python perf/report_load.py results/report/index.html
    uv run python perf/report_load.py --synthetic 6000      # a sweep of that many cells, made up: minutes
    uv run python perf/report_load.py --synthetic 600 --repeats 1   # the small mode the tests run

Opens the page from disk in Debian's Chromium (Playwright drives it; no download) three times and
prints the median of: first contentful paint (the first screen drawn), DOMContentLoaded, load, and
the moment the table of all cells has drawn its first page; plus the page's bytes by part. The
synthetic mode renders a report of N cells (60 models, both schemes, every target and memory mode
Vela accepts, times made up) with the report's own code, so its weight and speed can be measured
without sweeping: docs/performance.md has both, for the deployed zoo's real report too.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

HEADLESS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def synthetic_rows(cells: int) -> list[dict]:
    """Summary rows of a made-up sweep: models x both schemes x every configuration, `cells` in all."""
    from ethosweep.matrix.expand import build_sweep
    from ethosweep.results.summary import COLUMNS

    sweep = build_sweep(
        {
            "models": [{"name": "m", "import": "x:y", "inputs": [{"shape": [1]}]}],
            "targets": "all",
            "memory_modes": "all",
        }
    )
    configs = [(c.target, c.system_config, c.memory_mode) for c in sweep.cells]
    tasks = ["classification", "detection", "segmentation", "pose", "keyword spotting"]
    generator, rows = random.Random(0), []
    for index in range(max(1, cells // (2 * len(configs)))):
        scale = 10 ** generator.uniform(-1, 2)
        for quant in ("int8", "a16w8"):
            for target, system_config, mode in configs:
                ms = scale * 256 / int(target.rsplit("-", 1)[1]) * (1.3 if mode == "Shared_Sram" else 1.0)
                row = dict.fromkeys(COLUMNS, "")
                row.update(
                    model=f"model_{index:02d}",
                    task=tasks[index % len(tasks)],
                    quantization=quant,
                    target=target,
                    system_config=system_config,
                    memory_mode=mode,
                    status="ok",
                    vela_inference_ms=f"{ms:.4f}",
                    vela_cycles_total=str(int(ms * 5e5)),
                    vela_sram_kib=f"{generator.uniform(10, 900):.1f}",
                    pte_bytes=str(generator.randrange(10_000, 5_000_000)),
                    numerics="identical",
                    numerics_reason="identical to the quantized model on all 40 inputs; it differs on at most "
                    "7.2 % of inputs (95 %, Clopper-Pearson)",
                    vs_float="not judged",
                    cell=f"model_{index:02d}/{quant}/{target}/{system_config}/{mode}",
                )
                rows.append(row)
    return rows


def render_synthetic(cells: int, folder: Path) -> Path:
    from ethosweep.results.report import figures, index

    rows = synthetic_rows(cells)
    plots = {
        "cycles": figures.plot_cycles(rows),
        "fit": figures.plot_fit(rows, {}),
        "roofline": figures.plot_roofline(rows),
        "pareto": figures.plot_pareto(rows),
    }
    page = folder / "index.html"
    page.write_text(index.render_index(rows, plots, [], f"a made-up sweep of {len(rows)} cells"))
    return page


def measure(page: Path, repeats: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    found: dict[str, list[float]] = {"first paint": [], "DOMContentLoaded": [], "load": [], "table ready": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=HEADLESS)
        for _ in range(repeats):
            tab = browser.new_page()
            started = time.perf_counter()
            tab.goto(page.resolve().as_uri(), wait_until="load", timeout=300_000)
            tab.wait_for_selector("#cells tbody tr", timeout=300_000)
            found["table ready"].append(time.perf_counter() - started)
            timing = tab.evaluate(
                "() => { const n = performance.getEntriesByType('navigation')[0];"
                " const p = performance.getEntriesByName('first-contentful-paint')[0];"
                " return [p ? p.startTime : -1, n.domContentLoadedEventEnd, n.loadEventEnd]; }"
            )
            for name, value in zip(("first paint", "DOMContentLoaded", "load"), timing):
                found[name].append(value / 1000)
            tab.close()
        browser.close()
    return {name: statistics.median(values) for name, values in found.items()}


def weight(page: Path) -> dict[str, float]:
    """The page's MB, and the parts that weigh most: plots (inline SVG) and the table's data."""
    text = page.read_text()
    svg = sum(len(part.split("</svg>")[0]) for part in text.split("<svg")[1:])
    return {"page": len(text) / 1e6, "plots": svg / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, help="a report's index.html")
    parser.add_argument("--synthetic", type=int, help="render a made-up sweep of about this many cells instead")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the synthetic report here (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.workdir or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        page = render_synthetic(args.synthetic, folder) if args.synthetic else args.report
        made = time.perf_counter() - started
        weights = weight(page)
        times = measure(page, args.repeats)
    if args.synthetic:
        print(f"rendered in {made:.1f} s")
    print(f"page {weights['page']:.2f} MB (plots {weights['plots']:.2f} MB)")
    for name, seconds in times.items():
        print(f"{name}: {seconds:.2f} s")
    # what a user waits for: the first screen (the picks) must not wait for the table of every cell
    first = times["first paint"] < times["table ready"]
    print(
        f"verdict: the first screen is drawn {'before' if first else 'only after'} the table of all cells "
        f"({times['first paint']:.2f} s against {times['table ready']:.2f} s)"
    )
    return 0 if first else 1


if __name__ == "__main__":
    sys.exit(main())
