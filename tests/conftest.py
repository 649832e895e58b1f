import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

# as every esopt command sets them (esopt/cli/__init__.py): idle threads sleep, not spin
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "config" / "smoke.yaml"


def require_web() -> None:
    """For a module of web tests: skip it without the web extra or chromium, unless
    ESOPT_WEB_REQUIRED is set (CI sets it): then fail, naming what is missing."""
    from esopt.envs.web.deps import missing

    lacking = missing()
    if lacking and os.environ.get("ESOPT_WEB_REQUIRED"):
        pytest.fail("ESOPT_WEB_REQUIRED is set but the web benchmark cannot run: " + "; ".join(lacking), pytrace=False)
    if lacking:
        pytest.skip("web benchmark dependencies missing: " + "; ".join(lacking), allow_module_level=True)


def done_generations(out: Path) -> int:
    """Generations an ES run in `out` has finished so far (its history in .resume/)."""
    try:
        return len(json.loads((out / ".resume" / "history.json").read_text())["generations"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


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


@pytest.fixture(scope="session")
def hybrid_model(tmp_path_factory) -> Path:
    """The smoke model with one Gated DeltaNet (linear-attention) layer and one full-attention
    layer, as Qwen3.5 mixes them (the smoke and tiny configs use full attention only), barely
    trained: for the tests of the linear-attention path (a few seconds)."""
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["model"]["name"] = "smoke-hybrid"
    cfg["model"]["tiny"]["layer_types"] = ["linear_attention", "full_attention"]
    cfg["model"]["warmstart"]["steps"] = 20
    root = tmp_path_factory.mktemp("hybrid")
    (root / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    subprocess.run([sys.executable, "-m", "esopt.cli.build_model", "--config", str(root / "cfg.yaml"),
                    "--out", str(root / "model")], check=True, capture_output=True)
    return root / "model"


@pytest.fixture(scope="session")
def qwen3_model(tmp_path_factory):
    """The smoke config's model as a Qwen3ForCausalLM with 32-dim heads (vLLM's CPU attention
    has no kernel for smaller ones), built and warm-started by the real CLI (about a minute)."""
    from esopt.config import load_config

    cfg = load_config(SMOKE)
    cfg["model"]["name"] = "smoke-qwen3"
    cfg["model"]["tiny"].update(architecture="qwen3", layer_types=["full_attention"] * 2, hidden_size=64,
                                intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    cfg["model"]["warmstart"]["steps"] = 200  # enough to fill some cells, so ES members' rewards differ
    root = tmp_path_factory.mktemp("qwen3")
    (root / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    subprocess.run([sys.executable, "-m", "esopt.cli.build_model", "--config", str(root / "cfg.yaml"),
                    "--out", str(root / "model")], check=True, capture_output=True)
    return root / "model"


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 in a daemon thread, stopped at close(): the tests'
    stand-in sites and endpoints."""

    def __init__(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
