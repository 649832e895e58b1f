"""The tiny warm start's checkpoint selection on the validation split."""

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


def test_without_a_scorer_the_last_step_is_kept_and_nothing_is_scored():
    cfg = load_config(SMOKE)
    model, tok, transcripts = _tiny(cfg)
    stats = supervised_fine_tune(model, tok, transcripts, SFTSettings(6, 8, 3e-3, 0, select_every=2), progress=False)
    assert "selection" not in stats


def test_sft_settings_take_select_every_from_the_warmstart_block():
    ws = {"steps": 100, "batch_size": 8, "lr": 1e-3, "seed": 3}
    assert sft_settings(ws).select_every is None
    assert sft_settings(ws | {"select": {"every": 25, "episodes": 8, "horizons": [2]}}).select_every == 25


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
