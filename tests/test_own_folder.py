"""Your experiment in your own folder: a config, a model file and its results outside the clone,
with a checkout of ethosweep as the workflow (README, "Your experiment in your own folder")."""

import csv
import re

from conftest import DOCS, REPO, typed

MODEL = """import torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


ModelUnderTest = Net().eval()
ModelInputs = (torch.rand(1, 1, 8, 8),)
"""


def test_an_experiment_in_a_folder_of_its_own_runs_with_ethosweep_as_its_workflow(tmp_path):
    (command,) = [c for c in re.findall(r"^uv run --project \S+ snakemake .*$", DOCS["README.md"], re.M)]
    (tmp_path / "ethosweep").symlink_to(REPO)  # "../ethosweep: a clone of ethosweep beside your folder"
    mine = tmp_path / "my-experiment"
    (mine / "config").mkdir(parents=True)
    (mine / "models").mkdir()
    (mine / "models" / "net.py").write_text(MODEL)
    (mine / "config" / "config.yaml").write_text(
        "models:\n  - {name: net, file: models/net.py}\ntargets: [ethos-u55-128]\nmemory_modes: [Shared_Sram]\n"
    )
    before = sorted(p.name for p in REPO.iterdir())
    proc = typed(command.replace("--cores 8", "--cores 2"), mine)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 of 1 cells ok" in proc.stderr  # ethosweep's own end of the run (its profile and hooks)
    (row,) = csv.DictReader(open(mine / "results" / "summary.csv"))
    assert (row["model"], row["status"], row["ethosweep_version"]) == ("net", "ok", "0.1.0")
    assert int(row["vela_cycles_total"]) > 0 and (mine / "results" / "report" / "index.html").exists()
    assert {p.name for p in mine.iterdir()} >= {"results", "logs", "benchmarks", "config", "models"}
    assert sorted(p.name for p in REPO.iterdir()) == before  # nothing written into the checkout
