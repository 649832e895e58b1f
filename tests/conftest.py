import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "config" / "smoke.yaml"


@pytest.fixture(autouse=True)
def _one_thread():
    # Bit-exactness claims are per device and thread count; keep tests on one thread.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smoke_model(tmp_path_factory) -> Path:
    """The smoke config's tiny Qwen3.5 model, built by the real CLI (a few seconds)."""
    out = tmp_path_factory.mktemp("models") / "smoke"
    subprocess.run([sys.executable, "-m", "esopt.cli.build_model", "--config", str(SMOKE), "--out", str(out)],
                   check=True, capture_output=True)
    return out
