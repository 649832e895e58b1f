"""The tiny warm start's checkpoint selection on the validation split."""

import pytest
import torch

from esopt.config import load_config
from esopt.envs.sudoku import generate_puzzles, split_of
from esopt.models.build import sft_settings
from esopt.models.demonstrations.sudoku import SudokuDemos, demonstrations
from esopt.models.sft import SFTSettings, supervised_fine_tune
from esopt.models.tiny import build_tiny_model
from esopt.models.tokenizer import train_tokenizer
from esopt.runs.episodes import validation_score

from conftest import SMOKE


def _tiny(cfg):
    m = cfg["model"]
    transcripts = list(demonstrations(SudokuDemos.from_config(cfg, m["warmstart"])))
    corpus = ["".join(f"{x['role']}\n{x['content']}\n" for x in t) for t in transcripts]
    tok = train_tokenizer(corpus, m["tiny"]["vocab_size"])
    return build_tiny_model(m["tiny"], tok, seed=0).float(), tok, transcripts


def test_selection_leaves_the_model_at_the_best_scored_checkpoint():
    cfg = load_config(SMOKE)
    model, tok, transcripts = _tiny(cfg)
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    scores = iter([0.2, 0.7, 0.7, 0.1])  # step 10 best; step 15 ties it and loses (earliest wins)

    def scorer(m):
        snapshots[len(snapshots)] = {k: v.clone() for k, v in m.state_dict().items()}
        return next(scores)

    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(20, 8, 3e-3, 0, select_every=5),
                                 progress=False, scorer=scorer)
    sel = stats["selection"]
    assert [c["step"] for c in sel["curve"]] == [5, 10, 15, 20]
    assert (sel["best_step"], sel["best_score"]) == (10, 0.7)
    assert not model.training
    best, last = snapshots[1], snapshots[3]
    now = model.state_dict()
    assert all(torch.equal(now[k], best[k]) for k in best)
    assert any(not torch.equal(now[k], last[k]) for k in last)


def test_a_target_stops_the_warm_start_at_the_first_checkpoint_that_reaches_it():
    cfg = load_config(SMOKE)
    model, tok, transcripts = _tiny(cfg)
    snapshots: list[dict[str, torch.Tensor]] = []
    scores = iter([0.2, 0.5, 0.6, 0.9])  # step 10 reaches 0.5: steps 11-20 never run

    def scorer(m):
        snapshots.append({k: v.clone() for k, v in m.state_dict().items()})
        return next(scores)

    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(20, 8, 3e-3, 0, select_every=5, select_target=0.5),
                                 progress=False, scorer=scorer)
    sel = stats["selection"]
    assert [c["step"] for c in sel["curve"]] == [5, 10]
    assert (sel["best_step"], sel["target"], sel["target_reached"]) == (10, 0.5, True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in snapshots[1].items())

    # the same run with its steps up to 10 unchanged (the schedule is the 20 steps'), so the
    # stop leaves the model where a full run was at step 10
    full, _, _ = _tiny(cfg)
    full_run: list[dict[str, torch.Tensor]] = []

    def keep(m):
        full_run.append({k: v.clone() for k, v in m.state_dict().items()})
        return 0.0

    supervised_fine_tune(full, tok, transcripts, SFTSettings(20, 8, 3e-3, 0, select_every=10), progress=False, scorer=keep)
    assert all(torch.equal(full_run[0][k], v) for k, v in snapshots[1].items())


def test_an_unreached_target_runs_every_step_and_keeps_the_best():
    cfg = load_config(SMOKE)
    model, tok, transcripts = _tiny(cfg)
    scores = iter([0.2, 0.4, 0.3, 0.1])
    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(20, 8, 3e-3, 0, select_every=5, select_target=0.5),
                                 progress=False, scorer=lambda m: next(scores))
    sel = stats["selection"]
    assert [c["step"] for c in sel["curve"]] == [5, 10, 15, 20]
    assert (sel["best_step"], sel["target_reached"]) == (10, False)


def test_without_a_scorer_the_last_step_is_kept_and_nothing_is_scored():
    cfg = load_config(SMOKE)
    model, tok, transcripts = _tiny(cfg)
    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(6, 8, 3e-3, 0, select_every=2), progress=False)
    assert "selection" not in stats


def test_sft_settings_take_select_every_from_the_warmstart_block():
    ws = {"steps": 100, "batch_size": 8, "lr": 1e-3, "seed": 3}
    assert sft_settings(ws).select_every is None
    assert sft_settings(ws | {"select": {"every": 25, "episodes": 8, "horizons": [2]}}).select_every == 25
    assert sft_settings(ws | {"select": {"every": 25, "episodes": 8, "horizons": [2]}}).select_target is None
    assert sft_settings(ws | {"select": {"every": 25, "episodes": 8, "horizons": [2], "target": 0.35}}).select_target == 0.35


def test_validation_score_plays_valid_puzzles_only(smoke_model):
    from esopt.models.load import load_model_and_tokenizer

    cfg = load_config(SMOKE)
    model, tok = load_model_and_tokenizer(smoke_model)
    select = {"every": 5, "episodes": 6, "horizons": [2, 3], "seed": 4}
    score = validation_score(cfg, select)
    a, b = score(model, tok), score(model, tok)
    assert 0.0 <= a <= 1.0 and a == b  # same puzzles and sampling seed at every checkpoint
    for h in select["horizons"]:
        tasks = generate_puzzles(4, h, 6, seed=4, split="valid")
        assert {split_of(t.puzzle) for t in tasks} == {"valid"}
        assert not {t.puzzle for t in tasks} & {t.puzzle for t in generate_puzzles(4, h, 300, seed=4, split="train")}


def test_cell_tokens_make_every_board_cell_one_token():
    cfg = load_config(SMOKE)
    cfg["sudoku"]["size"] = 6
    ws = dict(cfg["model"]["warmstart"], blanks=[8, 12], puzzles_per_blank=20)
    corpus = ["".join(f"{x['role']}\n{x['content']}\n" for x in t)
              for t in demonstrations(SudokuDemos.from_config(cfg, ws))]
    row = "1..4.."
    merged = train_tokenizer(corpus, 384)
    cells = train_tokenizer(corpus, 384, cell_tokens=True)
    assert len(merged(row)["input_ids"]) < 6  # runs of empty cells merge without the option
    assert [cells.decode([i]) for i in cells(row)["input_ids"]] == list(row)
    reply = "r2c3=6"  # replies and feedback still tokenize as before
    assert cells(reply)["input_ids"] and cells.decode(cells(reply)["input_ids"]) == reply


class _Killed(Exception):
    pass


def test_a_killed_warm_start_resumes_and_ends_where_an_uninterrupted_one_would(tmp_path):
    cfg = load_config(SMOKE)
    s = SFTSettings(20, 8, 3e-3, 0, select_every=5)
    info = {"tiny": cfg["model"]["tiny"]}

    def score(m):  # deterministic in the weights, so the selection depends on the path taken
        return float(sum(p.double().sum() for p in m.parameters())) % 1.0

    full, tok, transcripts = _tiny(cfg)
    want = supervised_fine_tune(full, tok, transcripts, s, progress=False, scorer=score)

    ckpt = tmp_path / ".model.warmstart.pt"
    calls = []

    def dies_at_step_15(m):
        calls.append(1)
        if len(calls) == 3:  # the checkpoint of step 10 is on disk; step 15's never is
            raise _Killed
        return score(m)

    model, _, _ = _tiny(cfg)
    with pytest.raises(_Killed):
        supervised_fine_tune(model, tok, transcripts, s, progress=False, scorer=dies_at_step_15, checkpoint=ckpt, run_info=info)
    assert torch.load(ckpt, weights_only=False)["step"] == 10

    model, _, _ = _tiny(cfg)  # a fresh process: new weights, the state comes from the file
    got = supervised_fine_tune(model, tok, transcripts, s, progress=False, scorer=score, checkpoint=ckpt, run_info=info)
    assert got == want
    assert all(torch.equal(model.state_dict()[k], v) for k, v in full.state_dict().items())

    with pytest.raises(ValueError, match="different warm start.*sft"):
        supervised_fine_tune(model, tok, transcripts, SFTSettings(20, 8, 1e-3, 0, select_every=5), progress=False,
                             scorer=score, checkpoint=ckpt, run_info=info)


def test_a_warm_start_killed_after_reaching_its_target_trains_no_further(tmp_path):
    cfg = load_config(SMOKE)
    s = SFTSettings(20, 8, 3e-3, 0, select_every=5, select_target=0.5)
    ckpt = tmp_path / "w.pt"
    model, tok, transcripts = _tiny(cfg)
    scores = iter([0.2, 0.6])  # step 10 reaches the target; the process dies before the model is saved
    want = supervised_fine_tune(model, tok, transcripts, s, progress=False, scorer=lambda m: next(scores), checkpoint=ckpt)
    assert torch.load(ckpt, weights_only=False)["step"] == 10
    again, _, _ = _tiny(cfg)
    got = supervised_fine_tune(again, tok, transcripts, s, progress=False, scorer=lambda m: 1 / 0, checkpoint=ckpt)
    assert got == want  # nothing scored, nothing trained: the saved run's outcome
    assert all(torch.equal(again.state_dict()[k], v) for k, v in model.state_dict().items())


def test_build_tiny_resumes_a_killed_warm_start_and_removes_its_checkpoint(tmp_path):
    from esopt.models.build import build_tiny, warmstart_checkpoint
    from esopt.models.load import load_model_and_tokenizer

    cfg = load_config(SMOKE)
    m = cfg["model"]
    transcripts = list(demonstrations(SudokuDemos.from_config(cfg, m["warmstart"])))
    s = SFTSettings(12, 8, 3e-3, 0, select_every=4)
    build_tiny(m, transcripts, s, tmp_path / "whole", score=lambda model, tok: 0.0)

    calls = []

    def dies_at_step_8(model, tok):
        calls.append(1)
        if len(calls) == 2:
            raise _Killed
        return 0.0

    out = tmp_path / "pieces"
    with pytest.raises(_Killed):
        build_tiny(m, transcripts, s, out, score=dies_at_step_8)
    assert warmstart_checkpoint(out).exists() and not out.exists()
    build_tiny(m, transcripts, s, out, score=lambda model, tok: 0.0)
    assert not warmstart_checkpoint(out).exists()
    whole, pieces = load_model_and_tokenizer(tmp_path / "whole")[0], load_model_and_tokenizer(out)[0]
    assert all(torch.equal(pieces.state_dict()[k], v) for k, v in whole.state_dict().items())
