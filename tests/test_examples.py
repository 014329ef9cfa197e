"""Every program in examples/ runs on 2 ranks and passes its own checks (each asserts its
result against numpy and exits non-zero when wrong)."""
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_on_two_ranks(path):
    if "torch" in path.read_text():
        pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-m", "aluminum.run", "-n", "2", str(path)],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    if "import aluminum as al" in path.read_text():   # the communication examples
        assert "over 2 ranks" in run.stdout, run.stdout
    assert "RuntimeWarning" not in run.stderr, run.stderr     # shared memory let go of
