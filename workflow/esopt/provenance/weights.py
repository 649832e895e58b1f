"""The weight checks of a record: base and saved weights, ES histories replayed bit for bit.

Weight checks load models on the CPU; the replay runs on the device type the run's
weights lived on (the record's model_device; older records: a GPU whenever one was
visible). ES noise is drawn per device type: a GPU run is replayed on a GPU, and
skipped with a message where there is none, with the run's torch thread count.
Models with more than `max_replay_params` parameters skip the weight checks with a
message (run `esopt replay` where the model fits); small ones are compared bit for
bit, no tolerance. The replay rounds updates as the run did (the history's
es.update_rounding: nearest, stochastic or fp32_master).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from math import prod
from pathlib import Path
from typing import Any

from esopt.provenance.find import flag_value
from esopt.provenance.published import WEIGHTS_NOTE
from esopt.provenance.record_checks import Check, _run_horizon, _short, is_es_agent

log = logging.getLogger("esopt.audit")

def count_parameters(model_dir: Path) -> int | None:
    """Parameter count from safetensors headers (no weights read); None without safetensors."""
    total, seen = 0, False
    for f in sorted(model_dir.rglob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
        seen = True
    return total if seen else None


def run_device(rec: dict[str, Any]) -> str:
    """Device type an ES run's weights lived on; noise is drawn per device type, so a replay
    must match it. The record's model_device says it ("cuda:0" -> "cuda"); older records
    name a GPU whenever CUDA was visible, and models loaded on it then
    (esopt.models.load.default_device)."""
    md = rec.get("model_device")
    if isinstance(md, str) and md:
        return md.split(":", 1)[0]
    return "cuda" if (rec.get("device") or {}).get("gpu") else "cpu"


def _device_available(device: str) -> bool:
    import torch

    if device == "cpu":
        return True
    if device == "cuda":
        return torch.cuda.is_available()
    backend = getattr(torch.backends, device, None)
    return bool(backend is not None and getattr(backend, "is_available", lambda: False)())


@contextmanager
def torch_threads(n: Any) -> Iterator[None]:
    """Run with the thread count the record was made with (bit-exactness is per device and threads)."""
    import torch

    old = torch.get_num_threads()
    if isinstance(n, int) and n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)



class WeightChecks:
    """The Auditor's weight checks; `replay` and `max_replay_params` are its settings."""

    replay: str
    max_replay_params: int

    def weight_checks(self, rec: dict[str, Any], res: Callable[[str], Path], rp: str,
                      published: bool = False) -> list[Check]:
        """published: the record lies in a published tree, where no weights are (a base model
        built in this checkout is used for the replay)."""
        from esopt.es.history import History

        checks: list[Check] = []
        es = rec["command"] in ("train-es", "search-heuristics") or is_es_agent(rec)
        hist_key = next((o for o in rec["outputs"] if Path(o).name == "history.json"), None)
        history = None
        if es and hist_key is None:
            checks.append(Check("history", "(none)", "fail", f"{rec['command']} record lists no history.json output", rp))
        elif es:
            try:
                history = History.load(res(hist_key))
            except (OSError, ValueError, TypeError, KeyError) as e:
                checks.append(Check("history", hist_key, "fail", f"does not load: {e}", rp))
            else:
                bad = []
                variant = flag_value(rec.get("argv") or [], "--variant")
                want_method = f"es_{variant}" if variant else "esopt"  # esopt.runs.sudoku_training.es_method_name
                if rec["command"] == "train-agent":
                    want_method = rec.get("method") or flag_value(rec.get("argv") or [], "--method")
                if history.run.get("method") is not None and history.run["method"] != want_method:
                    bad.append(f"method {history.run['method']!r}, the command ran {want_method!r}")
                h = _run_horizon(rec)
                if history.run.get("horizon") is not None and h is not None and history.run["horizon"] != h:
                    bad.append(f"horizon {history.run['horizon']}, the command ran H*={h}")
                if history.run.get("base_weights_sha256") != rec.get("base_weights_sha256"):
                    bad.append(f"base weights {_short(history.run.get('base_weights_sha256'))} != record {_short(rec.get('base_weights_sha256'))}")
                final = (history.final or {}).get("weights_sha256")
                if final != rec["final_weights_sha256"]:
                    bad.append(f"final weights {_short(final)} != record {_short(rec['final_weights_sha256'])}")
                checks.append(Check("history", hist_key, "fail" if bad else "ok",
                                    "; ".join(bad) or f"{len(history.generations)} generations, hashes agree with the record", rp))

        ranks = rec.get("ranks")
        if es and isinstance(ranks, dict):
            ws, reps = ranks.get("world_size"), ranks.get("replica_weights_sha256")
            if not isinstance(reps, list) or len(reps) != ws:
                checks.append(Check("ranks", rp, "fail", f"world_size {ws} but replica hashes {reps!r}", rp))
            elif any(r != rec["final_weights_sha256"] for r in reps):
                odd = [i for i, r in enumerate(reps) if r != rec["final_weights_sha256"]]
                checks.append(Check("ranks", rp, "fail", f"replicas {odd} of {ws} ended at other weights than "
                                    f"final_weights_sha256 {_short(rec['final_weights_sha256'])}", rp))
            elif isinstance(ws, int) and ws > 1:
                checks.append(Check("ranks", rp, "ok", f"{ws} replicas ended at {_short(rec['final_weights_sha256'])}", rp))
        model_arg = flag_value(rec.get("argv") or [], "--model")
        out_arg = flag_value(rec.get("argv") or [], "--out")
        base_dir = res(model_arg) if model_arg else None
        saves_model = rec["command"] != "search-heuristics"  # online ES at test time keeps no model
        saved_key = str(Path(out_arg) / "model") if out_arg and saves_model else None
        saved_dir = res(saved_key) if saved_key else None
        names = (["base-weights"] + (["replay"] if es else []) + (["saved-weights"] if saves_model else []))
        targets = {"base-weights": model_arg or "(none)", "replay": hist_key or "(none)", "saved-weights": saved_key or "(none)"}

        def skip_all(why: str) -> list[Check]:
            return checks + [Check(n, targets[n], "skip", why, rp) for n in names]

        if not es:
            checks.append(Check("replay", "(train-rl)", "note", "RL runs are not replayable (optimizer state, sampled "
                                "rollouts): their outputs are re-hashed and their weights checked, nothing more", rp))
        saved_missing = saved_dir is None or not (saved_dir / "config.json").is_file()
        if published and saves_model and saved_missing:  # never published: say so, not a failure
            names.remove("saved-weights")
            checks.append(Check("saved-weights", targets["saved-weights"], "note",
                                WEIGHTS_NOTE.get(rec["command"], "model weights are not published"), rp))
        if base_dir is None or not (base_dir / "config.json").is_file():
            if published:
                return skip_all(f"skipped: base model not present ({model_arg}; build it with snakemake, then audit "
                                "again to check it" + (" and replay the history)" if es else ")"))
            return skip_all(f"base model directory not found ({base_dir}); see the input checks")
        n = count_parameters(base_dir)
        if self.replay != "always" and (n is None or n > self.max_replay_params):
            size = "unknown size (no safetensors)" if n is None else f"{n:.1e} params > --max-replay-params {self.max_replay_params:.1e}"
            return skip_all(f"skipped: {size}; run `esopt replay` (or audit --replay always) where the model fits")
        if "saved-weights" not in names:
            saved_dir = None  # noted above
        return checks + self._load_and_replay(rec, history, base_dir, saved_dir, targets, es, rp,
                                              check_saved="saved-weights" in names)

    def _load_and_replay(self, rec, history, base_dir: Path, saved_dir: Path | None, targets: dict[str, str],
                         es: bool, rp: str, check_saved: bool = True) -> list[Check]:
        from transformers.utils import logging as hf_logging

        from esopt.hashing import weights_sha256
        from esopt.models.load import load_model_and_tokenizer

        hf_logging.disable_progress_bar()  # one "Loading weights" bar per model would bury the checks
        checks: list[Check] = []
        device = run_device(rec) if es else "cpu"
        run_on = device
        replay_here = True
        if not _device_available(device):
            device, replay_here = "cpu", False  # the hashes still check on the CPU; the replay cannot
        with torch_threads((rec.get("device") or {}).get("torch_threads")):
            # train-rl loads its base in rl.dtype (fp32 master weights) and hashes that
            dtype = None if es else (rec.get("base_weights_dtype") or (rec["config"].get("rl") or {}).get("dtype"))
            try:
                model, _ = load_model_and_tokenizer(base_dir, dtype=dtype, device=device)
            except Exception as e:  # noqa: BLE001 -- a swapped or broken model fails the check; the audit goes on
                checks.append(Check("base-weights", targets["base-weights"], "fail", f"does not load: {type(e).__name__}: {e}", rp))
                model = None
            base_ok = False
            if model is not None:
                got = weights_sha256(model)
                base_ok = got == rec.get("base_weights_sha256")
                checks.append(Check("base-weights", targets["base-weights"], "ok" if base_ok else "fail",
                                    f"{_short(got)}" if base_ok else
                                    f"loads to {_short(got)}, the run started from {_short(rec.get('base_weights_sha256'))}", rp))
            if es and base_ok and history is not None and history.run.get("weight_scale") is not None:
                checks.append(Check("weight-scale", targets["base-weights"], *self._weight_scale(history, model), rp))
            if es:
                n_gen = len(history.generations) if history is not None else 0
                if history is None:
                    checks.append(Check("replay", targets["replay"], "fail", "no loadable history to replay", rp))
                elif not base_ok:
                    checks.append(Check("replay", targets["replay"], "fail", "the base model is not the run's base (see base-weights)", rp))
                elif self.replay == "never":
                    checks.append(Check("replay", targets["replay"], "skip", "skipped (--no-replay)", rp))
                elif not replay_here:
                    gpu = (rec.get("device") or {}).get("gpu")
                    where = rec.get("model_device") or run_on
                    checks.append(Check("replay", targets["replay"], "skip",
                                        f"the run's weights lived on {where}" + (f" ({gpu})" if gpu else "")
                                        + f" and ES noise is drawn per device type: audit where {run_on} is "
                                        "available to replay it", rp))
                else:
                    log.info("replaying %d generations of %s on %s", n_gen, targets["replay"], device)
                    history.replay(history.perturber(model))
                    got = weights_sha256(model)
                    ok = got == rec["final_weights_sha256"]
                    how = f"{n_gen} generations on {device}" + (
                        f" ({history.update_rounding} rounding)" if history.update_rounding != "nearest" else "")
                    detail = f"{how} → {_short(got)}, as saved"
                    if not ok:
                        detail = (f"{how} → {_short(got)}, "
                                  f"the run saved {_short(rec['final_weights_sha256'])}" + self._drift(rec))
                    checks.append(Check("replay", targets["replay"], "ok" if ok else "fail", detail, rp))
            del model
            if rec["command"] == "search-heuristics" or not check_saved:
                pass  # test-time ES keeps no model: the replay is its weight check (or: not published, noted)
            elif saved_dir is None or not (saved_dir / "config.json").is_file():
                checks.append(Check("saved-weights", targets["saved-weights"], "fail", f"no saved model at {saved_dir}", rp))
            else:
                try:
                    saved, _ = load_model_and_tokenizer(saved_dir, device="cpu")
                    got = weights_sha256(saved)
                    del saved
                except Exception as e:  # noqa: BLE001 -- as above
                    checks.append(Check("saved-weights", targets["saved-weights"], "fail", f"does not load: {type(e).__name__}: {e}", rp))
                else:
                    ok = got == rec["final_weights_sha256"]
                    checks.append(Check("saved-weights", targets["saved-weights"], "ok" if ok else "fail",
                                        _short(got) if ok else f"loads to {_short(got)}, the run recorded {_short(rec['final_weights_sha256'])}", rp))
        return checks

    @staticmethod
    def _weight_scale(history, model) -> tuple[str, str]:
        """es.units weight_scale: the scale train-es multiplied α and σ by is the base's mean |θ|
        (the es-settings check holds the history to the recorded scale; this holds that scale to
        the base). Relative tolerance 1e-5: the sum's order differs across devices and threads."""
        from math import isclose

        from esopt.es.settings import mean_abs_weight

        recorded, got = float(history.run["weight_scale"]), mean_abs_weight(model)
        if isclose(recorded, got, rel_tol=1e-5):
            return "ok", f"α and σ were scaled by {recorded:.6g}, the base's mean |θ|"
        return "fail", (f"α and σ were scaled by {recorded:.6g}, but the base's mean |θ| is {got:.6g}: "
                        "the run's steps are not the config's in units of these weights")

    @staticmethod
    def _drift(rec: dict[str, Any]) -> str:
        """Why a replay may legitimately differ: other package versions or another device."""
        from esopt.provenance.record import package_versions

        now = package_versions()
        then = rec.get("packages") or {}
        diff = [f"{k} {then.get(k)} then, {now.get(k)} now" for k in ("python", "torch") if then.get(k) != now.get(k)]
        return f" ({'; '.join(diff)})" if diff else ""
