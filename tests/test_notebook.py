"""examples/notebooks/quickstart.ipynb runs top to bottom (nbclient, a real kernel), so it never rots."""
from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.spark

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "notebooks", "quickstart.ipynb")


def test_quickstart_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("QUICKSTART_DIR", str(tmp_path / "work"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    t0 = time.monotonic()
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("PersistedQueue" in h and "unsaved" in h for h in html)       # _repr_html_ of a collection
    assert any("image/png" in o.get("data", {}) for o in outputs)            # the checkpoint-bytes plot
    text = "".join(o.get("text", "") for o in outputs)
    assert "checkpoint 1:" in text and "epoch 1 -> 3" in text                # time travel and the CLI diff
    assert "rows_in=" in text and "timers_fired=" in text                     # the query's progress metrics
    assert time.monotonic() - t0 < 300
