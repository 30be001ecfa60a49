"""The notebooks in notebooks/ are executed (so they cannot rot): each in a temporary directory,
with a timeout, and no cell may fail. The instrument notebook's widgets are then driven through
their callbacks and its values checked."""

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TIMEOUT = 120  # per cell, generous for a loaded 2-core machine; each notebook runs in ~5 s


def execute(name: str, tmp_path: Path, monkeypatch, extra_cells: tuple[str, ...] = ()) -> list:
    """Run the notebook (plus ``extra_cells``) in ``tmp_path``; returns the executed cells."""
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "agg")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for source in extra_cells:
        nb.cells.append(nbformat.v4.new_code_cell(source))
    nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in nb.cells:  # execute() raises on an error; make sure nothing slipped through as output
        assert not [o for o in cell.get("outputs", []) if o.get("output_type") == "error"], cell.source
    return nb.cells


def stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")


def test_notebooks_are_committed_without_bulky_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01_quickstart.ipynb", "02_packing.ipynb", "03_instrument.ipynb", "04_inventory.ipynb",
                     "05_mixtures.ipynb"]
    for name in names:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert sum(len(json.dumps(c.get("outputs", []))) for c in nb.cells) < 20_000, f"{name}: strip its outputs"


def test_quickstart(tmp_path, monkeypatch):
    text = "".join(stdout(c) for c in execute("01_quickstart.ipynb", tmp_path, monkeypatch))
    assert "identical to torch's" in text and "bit-identical over 200 steps" in text
    assert "label after the reshard: elastic_reshard" in text


def test_packing(tmp_path, monkeypatch):
    text = "".join(stdout(c) for c in execute("02_packing.ipynb", tmp_path, monkeypatch))
    assert "40 batches bit-identical" in text


def test_mixtures_plots_a_real_run_and_resumes_bit_exact(tmp_path, monkeypatch):
    cells = execute("05_mixtures.ipynb", tmp_path, monkeypatch)
    text = "".join(stdout(c) for c in cells)
    assert "realised, steps 0-39:  [0.5    0.3004 0.1996]" in text and "realised, steps 40-99: [0.2 0.3 0.5]" in text
    assert "math: 2431 records consumed, epoch 40" in text
    assert "batches bit-identical; every source epoch is a permutation of the source" in text
    png = tmp_path / "nb_data" / "mixture" / "proportions.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "the plots"


DRIVE = """
import json as _json
_out = {}
for _eta, _x0 in [(0.5, 2.0), (0.25, 2.0)]:
    eta_box.value, x0_box.value, prediction_box.value = _eta, _x0, 0.5
    reset_button.click()
    _after_reset = (run["instrument"].x, run["instrument"].k)
    step_button.click()
    step_button.click()
    _out[str(_eta)] = {"after_reset": _after_reset, "x2": run["instrument"].x, "k": run["instrument"].k,
                       "trajectory": run["trajectory"], "status": status.value}
_out["refused"] = refused
_out["accepted_label"] = accepted_label
print("DRIVEN " + _json.dumps(_out))
"""


def test_instrument_widgets_reach_the_documented_values_and_the_contract_refuses_another_eta(tmp_path, monkeypatch):
    cells = execute("03_instrument.ipynb", tmp_path, monkeypatch, extra_cells=(DRIVE,))
    line = next(ln for ln in stdout(cells[-1]).splitlines() if ln.startswith("DRIVEN "))
    got = json.loads(line[len("DRIVEN "):])
    assert got["0.5"]["after_reset"] == [2.0, 0] and got["0.5"]["trajectory"] == [2.0, 1.0, 0.5]
    assert got["0.5"]["x2"] == 0.5 and got["0.5"]["k"] == 2 and "right" in got["0.5"]["status"]
    assert got["0.25"]["trajectory"] == [2.0, 1.5, 1.125] and got["0.25"]["x2"] == 1.125
    assert "not quite" in got["0.25"]["status"]          # the prediction field still says 0.5
    assert "refused under label='faithful_continuation'" in got["refused"] and "base_lr" in got["refused"]
    assert got["accepted_label"] == "optimizer_reset"


def test_inventory(tmp_path, monkeypatch):
    text = "".join(stdout(c) for c in execute("04_inventory.ipynb", tmp_path, monkeypatch))
    assert "recovery label:        faithful_continuation" in text and "dataset:               matches" in text
    assert "bit-identical to the uninterrupted run" in text
    assert "refused under label='faithful_continuation'" in text and "accepted as optimizer_reset" in text
