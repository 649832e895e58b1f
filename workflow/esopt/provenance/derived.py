"""The derived values of a record's results, recomputed from what they derive from.

A hash only says a file is the one the record names; these checks say its numbers are
the ones its sources give, so a value forged together with every hash still fails:

outputs      the record lists every file its command writes (a run's trajectories/ too)
es-settings  ES: the history's es settings (train-es: and its episode settings) are what
             the record's config gives for this run (horizon, variant, population, seed)
updates      ES: every generation's σ, α, member seeds, task seed, normalized rewards and
             update flag, recomputed from its raw rewards and the run's es settings
             (esopt.es.history.History.check); the replay makes its updates the same way
rewards      ES: member 0's reward, success and turns in each kept generation, recomputed
             from that generation's trajectories/genNNNN.jsonl
episodes     Sudoku: every kept episode (an evaluation's, or a run's member 0) replayed
             through the environment: the puzzle the seed gives, then every recorded
             action; each observation, reward and the outcome must be what it answers
metrics      metrics.jsonl recomputed from history.json (ES) or skill_history.jsonl
             (Trace2Skill)
budget       budget.json recomputed from history.json (ES) or metrics.jsonl (RL)
summary      an evaluation's summary recomputed from its trajectories and the record
             (success, its standard error, turns, Mean@k and each sample's score, ...)
result       search-heuristics: result.json's counts, best objective and best-so-far
             curve from samples.jsonl, its ES generations from history.json

What stays trusted: what a model chose (the actions; only a rerun could check them),
the tool environments' answers (a sandbox or OCR run each), RL losses and token counts.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from esopt.provenance.find import flag_value
from esopt.provenance.record_checks import Check, _run_horizon
from esopt.spec.sudoku import SudokuEpisodes

_SHOWN = 3  # problems listed in one check's detail


def _listed(problems: list[str]) -> str:
    return "; ".join(problems[:_SHOWN]) + (f" (+{len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else "")


def _val(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) <= 40 else s[:39] + "…"


def _plain(obj: Any) -> Any:
    """As JSON reads it back (tuples as lists, int keys as strings)."""
    return json.loads(json.dumps(obj))


def _dict_diff(got: dict[str, Any], want: dict[str, Any], what_got: str, what_want: str) -> list[str]:
    out = []
    for k in list(dict.fromkeys([*want, *got])):
        if k not in got:
            out.append(f"{k} missing from {what_got} ({what_want}: {_val(want[k])})")
        elif k not in want:
            out.append(f"{k} in {what_got} ({_val(got[k])}) but not in {what_want}")
        elif got[k] != want[k]:
            out.append(f"{k} {_val(got[k])} in {what_got}, {what_want} {_val(want[k])}")
    return out


def _jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _lines(path: Path) -> int | None:
    """JSON lines in a file (None: it does not parse; the checks that read it say so)."""
    try:
        return len(_jsonl(path))
    except (OSError, ValueError):
        return None


def _json_arg(text: str | None) -> Any:
    """A JSON command-line argument as the commands parse it (esopt.cli.common.parse_wildcards)."""
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return {"raw": text}


def trajectories_of(rows: list[dict[str, Any]]):
    """Trajectory objects from the lines of a trajectories file (extra keys dropped)."""
    from esopt.agent.rollout import Trajectory, Turn

    names = {f.name for f in fields(Trajectory)}
    out = []
    for r in rows:
        t = Trajectory(**{k: v for k, v in r.items() if k in names and k != "turns"})
        t.turns = [Turn(**turn) for turn in r.get("turns") or []]
        out.append(t)
    return out


def expected_outputs(rec: dict[str, Any], steps: int | None) -> tuple[list[Path], list[Path]]:
    """(files, trajectory files) the record's command writes, as it names them; `steps`: the
    generations or steps the run made (its metrics lines), for the trajectories it keeps."""
    from esopt.agent.rollout import kept_steps

    argv = rec.get("argv") or []
    out = flag_value(argv, "--out")
    if not out:
        return [], []
    out, cmd = Path(out), rec["command"]
    files: list[str] = []
    traj = None
    if cmd == "train-es":
        files, traj = ["history.json", "metrics.jsonl", "budget.json", "model/config.json"], "gen"
    elif cmd == "train-rl":
        files, traj = ["metrics.jsonl", "budget.json", "checkpoint.pt", "model/config.json"], "step"
    elif cmd == "train-agent":
        method = rec.get("method") or flag_value(argv, "--method") or ""
        files = ["metrics.jsonl"]
        if method.startswith("esopt"):
            files += ["history.json", "model/config.json"]
        if "trace2skill" in method:
            files += ["skill.md", "skill_history.jsonl"]
        if method == "grpo":
            files += ["checkpoint.pt", "model/config.json"]
        traj = "step" if method == "grpo" else "gen"
    elif cmd == "search-heuristics":
        files = ["result.json", "samples.jsonl"] + (["history.json"] if "--es" in argv else [])
    elif cmd == "evaluate":
        return [out, out.with_suffix(".trajectories.jsonl")], []
    elif cmd in ("memory", "check-models"):
        return [out], []
    kept = [out / "trajectories" / f"{traj}{t:04d}.jsonl" for t in sorted(kept_steps(steps))] if traj and steps else []
    return [out / f for f in files], kept


class DerivedChecks:
    """The Auditor's recomputations (see the module doc)."""

    def derived_checks(self, rec: dict[str, Any], res: Callable[[str], Path], rp: str) -> list[Check]:
        cmd = rec["command"]
        outputs = {Path(k): k for k in rec["outputs"]}
        out_arg = flag_value(rec.get("argv") or [], "--out")
        checks: list[Check] = []

        def output(rel: str | Path) -> tuple[str, Path] | None:
            """(recorded name, path) of a recorded output that is on disk (the output check
            reports the others)."""
            key = outputs.get(Path(out_arg) / rel if out_arg else Path(rel))
            return (key, res(key)) if key is not None and res(key).is_file() else None

        def run(name: str, target: str, fn: Callable[[], tuple[str, str] | None]) -> None:
            try:
                got = fn()
            except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
                got = ("fail", f"cannot be recomputed: {type(e).__name__}: {e}")
            if got is not None:
                checks.append(Check(name, target, got[0], got[1], rp))

        metrics = output("metrics.jsonl")
        history = None
        hist = output("history.json") if cmd != "evaluate" else None
        if hist is not None:
            from esopt.es.history import History

            try:
                history = History.load(hist[1])
            except (OSError, ValueError, TypeError, KeyError) as e:
                checks.append(Check("updates", hist[0], "fail", f"history does not load: {e}", rp))
        # the generations or steps made, for the trajectories kept: the history's, else one metrics line each
        steps = len(history.generations) if history is not None else _lines(metrics[1]) if metrics else None
        run("outputs", rp, lambda: self._outputs_listed(rec, outputs, steps))
        if cmd == "evaluate":
            sudoku = (flag_value(rec.get("argv") or [], "--benchmark") or "sudoku") == "sudoku"
            key = outputs.get(Path(out_arg)) if out_arg else None
            tkey = outputs.get(Path(out_arg).with_suffix(".trajectories.jsonl")) if out_arg else None
            if key and tkey and res(key).is_file() and res(tkey).is_file():
                fn = self._evaluate_summary if sudoku else self._agent_summary
                run("summary", key, lambda: fn(rec, json.loads(res(key).read_text()), _jsonl(res(tkey)), res))
                if sudoku:
                    run("episodes", tkey, lambda: self._evaluation_episodes(rec, _jsonl(res(tkey))))
            return checks

        if history is not None:
            run("es-settings", hist[0], lambda: self._es_settings(rec, history))
            run("updates", hist[0], lambda: self._updates(history))
        if history is not None and cmd in ("train-es", "train-agent"):
            for gen_file in sorted(res(k) for p, k in outputs.items() if p.parent.name == "trajectories"
                                   and p.name.startswith("gen") and out_arg and p.parent.parent == Path(out_arg)):
                if gen_file.is_file():
                    shown = str(Path(out_arg) / "trajectories" / gen_file.name)
                    run("rewards", shown, lambda f=gen_file: self._member_rewards(rec, history, f.name, _jsonl(f)))
                    if cmd == "train-es":
                        run("episodes", shown, lambda f=gen_file: self._member_episodes(rec, history, f.name, _jsonl(f)))
        if metrics is not None and history is not None and cmd == "train-es":
            run("metrics", metrics[0], lambda: self._es_metrics(rec, _jsonl(metrics[1]), history))
        if metrics is not None and history is not None and cmd == "train-agent":
            run("metrics", metrics[0], lambda: self._rows_match(
                _jsonl(metrics[1]), [g.metrics() for g in history.generations], "history.json's generations"))
        skills = output("skill_history.jsonl")
        if metrics is not None and skills is not None and history is None:
            run("metrics", metrics[0], lambda: self._rows_match(
                _jsonl(metrics[1]), [ln.get("metrics") for ln in _jsonl(skills[1])], "skill_history.jsonl's lines"))
        budget = output("budget.json")
        if budget is not None and cmd == "train-es" and history is not None:
            run("budget", budget[0], lambda: self._es_budget(rec, history, json.loads(budget[1].read_text()), res))
        if budget is not None and cmd == "train-rl" and metrics is not None:
            run("budget", budget[0], lambda: self._rl_budget(rec, json.loads(budget[1].read_text()), _jsonl(metrics[1])))
        result, samples = output("result.json"), output("samples.jsonl")
        if cmd == "search-heuristics" and result is not None and samples is not None:
            run("result", result[0], lambda: self._ahd_result(rec, json.loads(result[1].read_text()),
                                                              _jsonl(samples[1]), history))
            if history is not None:
                run("rewards", hist[0], lambda: self._ahd_rewards(history, _jsonl(samples[1])))
        return checks

    # -- outputs

    @staticmethod
    def _outputs_listed(rec, outputs: dict[Path, str], steps: int | None) -> tuple[str, str] | None:
        files, kept = expected_outputs(rec, steps)
        if not files:
            return None
        listed = set(outputs)
        missing = [str(f) for f in files if f not in listed]
        model = [p for p in listed if Path(flag_value(rec.get("argv") or [], "--out") or "") / "model" in p.parents]
        if any(str(f).endswith("model/config.json") for f in files) and not any(p.suffix == ".safetensors" for p in model):
            missing.append("model/*.safetensors")
        if missing:
            return "fail", f"{rec['command']} writes {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}: the record lists no such output"
        lost = [str(f) for f in kept if f not in listed]
        # a run continued from an earlier sitting's history or checkpoint (a published partial
        # run) kept the trajectories of its own generations or steps only
        cont = rec.get("continued_from") or {}
        before = {"train-es": cont.get("generations"), "train-rl": cont.get("steps")}.get(rec["command"]) or 0
        earlier = [f for f in lost if before and int(re.search(r"\d+$", Path(f).stem)[0]) < before]
        lost = [f for f in lost if f not in earlier]
        if lost:
            what = f"{len(lost)} trajectory file(s) ({', '.join(Path(x).name for x in lost[:3])}{' …' if len(lost) > 3 else ''})"
            if rec.get("record_version", 1) < 2:
                return "warn", f"{what} kept but not listed: a record from before trajectories were outputs (no record_version 2)"
            return "fail", f"{rec['command']} keeps {what}: the record lists none of them"
        if earlier:
            return "ok", (f"the record lists the {len(files) + len(kept) - len(earlier)} files {rec['command']} writes "
                          f"(continued after {before} {'steps' if rec['command'] == 'train-rl' else 'generations'} "
                          f"of an earlier sitting, whose {len(earlier)} "
                          "trajectory file(s) stayed there)")
        return "ok", f"the record lists the {len(files) + len(kept)} files {rec['command']} writes"

    # -- ES histories

    @staticmethod
    def _es_settings(rec, history) -> tuple[str, str]:
        from esopt.es.settings import ESConfig, scaled_units
        from esopt.spec.agents import AgentES

        cfg, argv, cmd = rec["config"], rec.get("argv") or [], rec["command"]
        got = dict(_plain(history.es))
        want: dict[str, Any]
        extra: dict[str, tuple[Any, Any]] = {}  # key -> (in the history, from the config)
        if cmd == "train-es":
            h, variant = _run_horizon(rec), flag_value(argv, "--variant")
            from esopt.runs.episodes import EpisodeSpec
            from esopt.spec.sudoku import EsRun, SudokuEpisodes

            es = EsRun.from_config(cfg, h, variant)
            settings = es.settings()
            if settings.get("units", "absolute") != "absolute" and history.run.get("weight_scale"):
                # α, σ in units of the base's mean |θ|, by the scale train-es recorded
                settings = scaled_units(settings, history.run["weight_scale"])
            want = ESConfig.from_settings(settings, int(flag_value(argv, "--population")),
                                          int(flag_value(argv, "--seed"))).as_record()
            got.setdefault("update_rounding", "nearest")  # histories from before the option rounded to nearest
            spec = EpisodeSpec.from_specs(SudokuEpisodes.from_config(cfg), h, es.member_decoding)
            if "episode" in history.run:
                extra["episode"] = (history.run["episode"], _plain(spec.record()))
            extra["tasks_per_member"] = (history.run.get("tasks_per_member"), es.tasks_per_member)
        elif cmd == "train-agent":
            e = AgentES.from_config(cfg, rec.get("benchmark") or flag_value(argv, "--benchmark"))
            want = ESConfig.from_settings(e.settings(), e.population, int(flag_value(argv, "--seed"))).as_record()
            got.setdefault("update_rounding", "nearest")
            extra["tasks_per_member"] = (history.run.get("tasks_per_member"), e.tasks_per_member)
        else:  # search-heuristics --es: esopt.ahd.experiment.design_heuristics
            e = cfg["ahd"]["es"]
            want = {"alpha": e["alpha"], "sigma0": e["sigma0"], "normalization": e["normalization"],
                    "penalty": e.get("penalty"), "update_rounding": e["update_rounding"],
                    "operators": ["m1", "m2"] if flag_value(argv, "--search") == "eoh" else ["i1"]}
        bad = _dict_diff(got, _plain(want), "the history's es", "the record's config gives")
        bad += [f"{k} {_val(a)} in the history, the record's config gives {_val(b)}" for k, (a, b) in extra.items() if a != b]
        if bad:
            return "fail", "the run's settings are not the record's: " + _listed(bad)
        return "ok", "the history's es settings are what the record's config gives this run"

    @staticmethod
    def _updates(history) -> tuple[str, str]:
        bad = history.check()
        if bad:
            return "fail", _listed(bad)
        n = len(history.generations)
        sigma = "" if history.run.get("kind") == "ahd" else "σ, "  # a search's σ follows its batches: not checked
        return "ok", (f"{n} generations: {sigma}α, seeds, normalized rewards and updates as the run's settings "
                      "make them from the raw rewards")

    @staticmethod
    def _generation(history, name: str):
        t = int(name.removeprefix("gen").removesuffix(".jsonl"))
        if not 0 <= t < len(history.generations):
            raise ValueError(f"generation {t}: the history has {len(history.generations)}")
        return history.generations[t]

    def _member_rewards(self, rec, history, name: str, rows: list[dict[str, Any]]) -> tuple[str, str]:
        g = self._generation(history, name)
        trajs = trajectories_of(rows)
        bad = []
        for key, want in (("generation", g.generation), ("member", 0), ("sigma", g.sigma)):
            if any(r.get(key) != want for r in rows):
                bad.append(f"lines not all {key} {want}")
        if rec["command"] == "train-es":
            from esopt.runs.episodes import summarize

            n_tasks = rec["config"]["es"]["tasks_per_member"]
            s = summarize(trajs) if trajs else {}
            got = {"reward": s.get("mean_reward"), "success": s.get("success"), "mean_turns": s.get("mean_turns")}
        else:
            from esopt.runs.tool_episodes import summarize_tool
            from esopt.spec.agents import AgentES

            n_tasks = AgentES.from_config(rec["config"], rec.get("benchmark")).tasks_per_member
            s = summarize_tool(trajs) if trajs else {}
            got = {"reward": s.get("score"), "success": s.get("success"), "mean_turns": s.get("mean_turns")}
        if len(trajs) != n_tasks:
            bad.append(f"{len(trajs)} episodes, a member runs {n_tasks}")
        info = g.member_info[0] if g.member_info else {}
        recorded = {"reward": g.rewards[0], "success": info.get("success"), "mean_turns": info.get("mean_turns")}
        bad += [f"member 0's {k} {_val(recorded[k])} in the history, its episodes give {_val(v)}"
                for k, v in got.items() if recorded[k] != v]
        if bad:
            return "fail", f"generation {g.generation}: " + _listed(bad)
        return "ok", f"generation {g.generation}: member 0's reward {g.rewards[0]:.6g} is its {len(trajs)} episodes'"

    def _member_episodes(self, rec, history, name: str, rows: list[dict[str, Any]]) -> tuple[str, str]:
        from esopt.runs.episodes import train_tasks
        from esopt.spec.sudoku import EsRun, SudokuEpisodes

        g = self._generation(history, name)
        cfg = rec["config"]
        h = _run_horizon(rec)
        episodes = SudokuEpisodes.from_config(cfg)
        tasks = train_tasks(episodes, h, EsRun.from_config(cfg).tasks_per_member, g.task_seed)
        bad = replay_sudoku_episodes(episodes, h, tasks, rows)
        if bad:
            return "fail", f"generation {g.generation}: " + _listed(bad)
        return "ok", f"generation {g.generation}: {len(rows)} episodes replayed through the environment, as recorded"

    # -- metrics and budgets

    @classmethod
    def _es_metrics(cls, rec, rows: list[Any], history) -> tuple[str, str]:
        """metrics.jsonl of a Sudoku ES run: the history's lines, plus the evaluations during
        training (es.eval_every: measured, not recomputable) at exactly the due generations."""
        from esopt.runs.periodic import EVAL_KEYS, eval_generations

        es = rec["config"]["es"]
        due = eval_generations(es["generations"], es.get("eval_every"))
        evaluated = {r.get("generation") for r in rows if isinstance(r, dict) and "eval" in r}
        done = {g.generation for g in history.generations}
        if evaluated != due & done:
            return "fail", f"evaluations after generations {sorted(evaluated)}, es.eval_every gives {sorted(due & done)}"
        plain = [{k: v for k, v in r.items() if k not in EVAL_KEYS} if isinstance(r, dict) else r for r in rows]
        status, msg = cls._rows_match(plain, [g.metrics() for g in history.generations], "history.json's generations")
        return status, msg + (f"; evaluated after generations {sorted(evaluated)}" if evaluated and status == "ok" else "")

    @staticmethod
    def _rows_match(rows: list[Any], want: list[Any], what: str) -> tuple[str, str]:
        want = _plain(want)
        bad = [] if len(rows) == len(want) else [f"{len(rows)} lines, {what}: {len(want)}"]
        for i, (a, b) in enumerate(zip(rows, want)):
            if a != b:
                diff = _dict_diff(a, b, "metrics.jsonl", what) if isinstance(a, dict) and isinstance(b, dict) else [f"{_val(a)} != {_val(b)}"]
                bad.append(f"line {i + 1}: " + "; ".join(diff[:2]))
        if bad:
            return "fail", _listed(bad)
        return "ok", f"{len(rows)} lines, as recomputed from {what}"

    @staticmethod
    def _es_budget(rec, history, budget: dict[str, Any], res) -> tuple[str, str]:
        from esopt.provenance.weights import count_parameters
        from esopt.runs.sudoku_training import es_budget
        from esopt.spec.sudoku import EsRun

        argv = rec.get("argv") or []
        # the saved model's parameter count; where its weights are not here (a published run), the
        # base model's (ES changes no shape), else budget.json's own, said so
        params = count_parameters(res(str(Path(flag_value(argv, "--out")) / "model")))
        if params is None and flag_value(argv, "--model"):
            params = count_parameters(res(flag_value(argv, "--model")))
        trusted = params is None and isinstance(budget.get("params"), int)
        if trusted:
            params = budget["params"]
        es = EsRun.from_config(rec["config"], _run_horizon(rec), flag_value(argv, "--variant"))
        want = es_budget(history, params, int(flag_value(argv, "--population")), es.tasks_per_member,
                         es.horizon, int(flag_value(argv, "--seed")), es.method)
        want["ranks"] = (rec.get("ranks") or {}).get("world_size", 1)
        bad = _dict_diff(budget, _plain(want), "budget.json", "the history gives")
        bad = [b.replace("the history gives", "the record's ranks give") if b.startswith("ranks ") else b for b in bad]
        if bad:
            return "fail", _listed(bad)
        return "ok", (f"{budget.get('episodes')} episodes, {budget.get('rollout_tokens')} tokens, as the history gives"
                      + (" (FLOPs from budget.json's parameter count: no model here)" if trusted else ""))

    @staticmethod
    def _rl_budget(rec, budget: dict[str, Any], metrics: list[dict[str, Any]]) -> tuple[str, str]:
        n = len(metrics)
        want: dict[str, Any] = {"steps": n}
        for k in ("episodes", "generated_tokens", "rollout_tokens", "train_tokens", "wall_s"):
            total = 0.0 if k == "wall_s" else 0
            for m in metrics:  # in the order the trainer added them (its totals)
                total += m[k]
            want[k] = total
        want["wall_s_per_step"] = want["wall_s"] / max(n, 1)
        if isinstance(budget.get("flops"), (int, float)):
            want["flops_per_step"] = budget["flops"] / max(n, 1)
        bad = [f"{k} {_val(budget.get(k))} in budget.json, metrics.jsonl gives {_val(v)}"
               for k, v in want.items() if budget.get(k) != v]
        if isinstance(rec.get("budget"), dict) and rec["budget"] != budget:
            bad.append("the record's budget differs from budget.json: " + "; ".join(
                _dict_diff(budget, rec["budget"], "budget.json", "the record")[:2]))
        if bad:
            return "fail", _listed(bad)
        return "ok", f"{n} steps, {want['episodes']} episodes, {want['train_tokens']} train tokens, as metrics.jsonl gives"

    # -- evaluations

    @staticmethod
    def _evaluate_summary(rec, summary: dict[str, Any], rows: list[dict[str, Any]], res) -> tuple[str, str]:
        from esopt.runs.episodes import combine_repeats, summarize
        from esopt.spec.sudoku import SudokuEvaluation

        cfg, argv = rec["config"], rec.get("argv") or []
        ev = SudokuEvaluation.from_config(cfg)
        repeats = ev.repeats
        h = _run_horizon(rec)
        seed = (rec.get("seeds") or {}).get("evaluate")
        bad = []
        want_seed = int(flag_value(argv, "--seed")) if flag_value(argv, "--seed") is not None else ev.seed
        if seed != want_seed:
            bad.append(f"the record's seed {seed}, the command ran with {want_seed}")
        if len(rows) != ev.episodes * repeats:
            bad.append(f"{len(rows)} episodes, evaluate.episodes x repeats is {ev.episodes} x {repeats}")
        if any(r.get("horizon") != h for r in rows):
            bad.append(f"episodes not all at horizon {h}")
        want = {"benchmark": flag_value(argv, "--benchmark") or "sudoku", "model": flag_value(argv, "--model"),
                "horizon": h, "meta": _json_arg(flag_value(argv, "--meta")), "decoding": ev.decoding, "seed": seed,
                **(summarize(trajectories_of(rows)) if rows and repeats == 1 else {})}
        n = ev.episodes
        if repeats > 1 and len(rows) == n * repeats:  # the repeats one after another in the trajectories
            want |= combine_repeats([summarize(trajectories_of(rows[k * n:(k + 1) * n])) for k in range(repeats)])
        bad += _dict_diff(summary, _plain(want), "the summary", "the trajectories and record give")
        if bad:
            return "fail", _listed(bad)
        return "ok", f"success {summary['success']:.4g} over {len(rows)} episodes, as recomputed from the trajectories"

    @staticmethod
    def _agent_summary(rec, summary: dict[str, Any], rows: list[dict[str, Any]], res) -> tuple[str, str]:
        from esopt.envs.benchmarks import get
        from esopt.runs.tool_episodes import TASKS_FILE, load_tasks, summarize_tool
        from esopt.spec.agents import AgentEvaluation

        cfg, argv = rec["config"], rec.get("argv") or []
        benchmark = flag_value(argv, "--benchmark")
        ev = AgentEvaluation.from_config(cfg, benchmark)
        k, n = ev.samples, len(rows)
        seed = (rec.get("seeds") or {}).get("evaluate")
        bad = []
        want_seed = int(flag_value(argv, "--seed")) if flag_value(argv, "--seed") is not None else ev.seed
        if seed != want_seed:
            bad.append(f"the record's seed {seed}, the command ran with {want_seed}")
        data = flag_value(argv, "--data")
        tasks_file = res(str(Path(data) / TASKS_FILE)) if data else None
        n_tasks = len(tasks_file.read_text().splitlines()) if tasks_file and tasks_file.is_file() else n // max(k, 1)
        if n != k * n_tasks:
            bad.append(f"{n} episodes, {k} samples of {n_tasks} tasks make {k * n_tasks}")
        trajs = trajectories_of(rows)
        samples = [summarize_tool(trajs[i * n_tasks:(i + 1) * n_tasks]) for i in range(k)] if n_tasks and n == k * n_tasks else []
        scores = [s["score"] for s in samples]
        want = {"benchmark": flag_value(argv, "--benchmark"), "model": flag_value(argv, "--model"),
                "skill": flag_value(argv, "--skill"), "meta": _json_arg(flag_value(argv, "--meta")), "k": k,
                "mean_at_k": statistics.fmean(scores) if scores else None,
                "sample_std": statistics.pstdev(scores) if scores else None, "scores": scores, "tasks": n_tasks,
                "decoding": ev.decoding, "seed": seed,
                **({f"all_{key}": v for key, v in summarize_tool(trajs).items()} if trajs else {})}
        summary_of = get(benchmark).summary  # the benchmark's own keys (web: by_site)
        if summary_of is not None and tasks_file and tasks_file.is_file():
            want |= summary_of(load_tasks(tasks_file.parent, benchmark), trajs)
        bad += _dict_diff(summary, _plain(want), "the summary", "the trajectories and record give")
        if bad:
            return "fail", _listed(bad)
        return "ok", f"Mean@{k} {summary['mean_at_k']:.4g} over {n} episodes, as recomputed from the trajectories"

    @staticmethod
    def _evaluation_episodes(rec, rows: list[dict[str, Any]]) -> tuple[str, str] | None:
        from esopt.envs.sudoku import generate_puzzles
        from esopt.spec.sudoku import SudokuEpisodes, SudokuEvaluation

        argv = rec.get("argv") or []
        if (flag_value(argv, "--benchmark") or "sudoku") != "sudoku":
            return None
        cfg, h = rec["config"], _run_horizon(rec)
        episodes, ev = SudokuEpisodes.from_config(cfg), SudokuEvaluation.from_config(cfg)
        tasks = generate_puzzles(episodes.size, h, ev.episodes, seed=(rec.get("seeds") or {}).get("evaluate"), split="eval")
        tasks = tasks * ev.repeats  # the trajectories hold the repeats one after another
        bad = replay_sudoku_episodes(episodes, h, tasks, rows)
        if bad:
            return "fail", _listed(bad)
        return "ok", f"{len(rows)} episodes replayed through the environment from their actions, as recorded"

    # -- heuristic search

    @staticmethod
    def _ahd_result(rec, result: dict[str, Any], samples: list[dict[str, Any]], history) -> tuple[str, str]:
        argv = rec.get("argv") or []
        valid = [s for s in samples if s.get("objective") is not None]
        finite = [s["objective"] for s in valid if math.isfinite(s["objective"])]
        curve, running = [], math.inf
        for s in samples:
            if s.get("objective") is not None:
                running = min(running, s["objective"])
            curve.append(None if running == math.inf else running)
        want = {"task": flag_value(argv, "--task"), "search": flag_value(argv, "--search"),
                "budget": int(flag_value(argv, "--budget")), "es": "--es" in argv, "seed": int(flag_value(argv, "--seed")),
                "response": rec["config"]["ahd"]["response"], "samples": len(samples),
                "batches": (max(s["batch"] for s in samples) + 1) if samples else 0,
                "valid_samples": len(valid), "valid_rate": len(valid) / max(len(samples), 1),
                "unique_codes": len({s.get("code") for s in samples}), "best_so_far": curve,
                "search_objective": min(finite) if finite else None,
                "es_generations": len(history.generations) if history is not None else 0}
        if history is not None:
            want["final_weights_sha256"] = rec.get("final_weights_sha256")
        best = result.get("best")
        bad = [f"{k} {_val(result.get(k))} in result.json, samples.jsonl and the record give {_val(v)}"
               for k, v in want.items() if result.get(k) != v]
        if len(samples) != want["budget"]:
            bad.append(f"{len(samples)} samples, the budget is {want['budget']}")
        if (best or {}).get("objective") != want["search_objective"]:
            bad.append(f"best objective {_val((best or {}).get('objective'))}, samples.jsonl's best is "
                       f"{_val(want['search_objective'])}")
        if bad:
            return "fail", _listed(bad)
        return "ok", f"{len(samples)} samples, {len(valid)} valid, best {want['search_objective']}, as samples.jsonl gives"


    @staticmethod
    def _ahd_rewards(history, samples: list[dict[str, Any]]) -> tuple[str, str]:
        """Each ES generation's member rewards from its children's objectives in samples.jsonl
        and their parents' (esopt.ahd.run.es_rewards: −objective, or parent − child)."""
        from esopt.ahd.run import es_rewards

        objective = {s["id"]: s.get("objective") for s in samples}
        bad = []
        for g in history.generations:
            children = [s for s in samples if s.get("es_generation") == g.generation]
            parents = [min((objective[q] for q in c.get("parents") or [] if objective.get(q) is not None), default=None)
                       for c in children]
            op = children[0]["operator"] if children else None
            want = es_rewards([c.get("objective") for c in children], parents, relative=op != "i1",
                              penalty=history.es.get("penalty"))
            valid = [{"operator": c["operator"], "valid": c.get("objective") is not None} for c in children]
            if g.rewards != want:
                bad.append(f"generation {g.generation}: rewards {_val(g.rewards)} recorded, its {len(children)} samples "
                           f"give {_val(want)}")
            elif g.member_info and g.member_info != valid:
                bad.append(f"generation {g.generation}: member_info is not its samples' operators and validity")
        if bad:
            return "fail", _listed(bad)
        return "ok", f"{len(history.generations)} generations: the members' rewards are their samples' objectives'"


def replay_sudoku_episodes(episodes: SudokuEpisodes, horizon: int, tasks: list[Any],
                           rows: list[dict[str, Any]]) -> list[str]:
    """Replay recorded Sudoku episodes through the environment, from the puzzles the seed
    gives and the recorded actions: what differs from the record (empty: all as recorded)."""
    from esopt.envs.sudoku import SudokuEnv, instructions, protocol_of

    max_turns = episodes.turn_budget(horizon)
    system = instructions(episodes.size, episodes.prompt)
    bad = [] if len(rows) == len(tasks) else [f"{len(rows)} episodes, the seed gives {len(tasks)} puzzles"]
    for j, (row, task) in enumerate(zip(rows, tasks)):
        where = f"episode {j}"
        env = SudokuEnv(max_turns, episodes.reward, episodes.observation, protocol_of(episodes.prompt))
        if row.get("task_id") != task.id:
            bad.append(f"{where}: puzzle {row.get('task_id')}, the seed gives {task.id}")
            continue
        if row.get("system") != system:
            bad.append(f"{where}: not the system prompt of the config")
        if row.get("first_observation") != env.reset(task):
            bad.append(f"{where}: the first observation is not the puzzle's")
            continue
        total, info, done = 0.0, {}, False
        turns = row.get("turns") or []
        for k, turn in enumerate(turns):
            if done:
                bad.append(f"{where}: {len(turns)} turns, the environment ended it after {k}")
                break
            obs, reward, done, info = env.step(turn.get("action"))
            total += float(reward)
            if obs != turn.get("observation") or float(reward) != turn.get("reward"):
                bad.append(f"{where} turn {k + 1}: recorded {_val(turn.get('observation'))} reward "
                           f"{turn.get('reward')}, the environment answers {_val(obs)} reward {reward}")
                break
        else:
            if turns and not done:
                bad.append(f"{where}: ends after {len(turns)} turns, the environment had not ended it")
            elif total != row.get("reward"):
                bad.append(f"{where}: reward {row.get('reward')} recorded, its turns give {total}")
            elif info != row.get("info"):
                bad.append(f"{where}: outcome " + "; ".join(_dict_diff(row.get("info") or {}, info, "recorded",
                                                                       "the environment gives")[:2]))
            elif row.get("num_turns", len(turns)) != len(turns):
                bad.append(f"{where}: num_turns {row.get('num_turns')}, {len(turns)} turns recorded")
    return bad
