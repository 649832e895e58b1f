"""The population engine (esopt.agent.population): its forward is the model's, and a
member's replies do not depend on which other members share the call (bit for bit)."""

import json

import pytest
import torch
from transformers import TopKLogitsWarper, TopPLogitsWarper

from esopt.agent.engine import HFEngine, Sampling
from esopt.agent.population import PopulationEngine, filter_logits, uniform_noise
from esopt.agent.rollout import render_prompt
from esopt.envs.sudoku import SudokuEnv, generate_puzzles, instructions
from esopt.es.perturb import Perturber
from esopt.models.load import load_model_and_tokenizer


def sudoku_prompts(tok, n: int, horizon: int = 3, seed: int = 1) -> list[list[int]]:
    """First-turn prompts of n 4x4 puzzles, plus a few shortened ones so prompt lengths differ."""
    out = []
    for t in generate_puzzles(4, horizon, n, seed=seed, split="train"):
        obs = SudokuEnv(12, "success").reset(t)
        msgs = [{"role": "system", "content": instructions(4, "short")}, {"role": "user", "content": obs}]
        out.append(tok(render_prompt(tok, msgs, False), add_special_tokens=False)["input_ids"])
    return [p[: len(p) - (i % 3) * 5] for i, p in enumerate(out)]


@pytest.fixture(scope="module")
def model(smoke_model):
    return load_model_and_tokenizer(smoke_model)


def test_forward_matches_transformers(model):
    m, tok = model
    m = m.float()
    engine = PopulationEngine(m, tok, slots=1)
    prompts = sudoku_prompts(tok, 3)
    w = engine._weights(None)
    for p in prompts:
        ids = torch.tensor([p])
        cache = [tuple(torch.zeros((1, 1, engine.kv_heads, engine.context, engine.head_dim)) for _ in range(2))
                 for _ in range(engine.layers)]
        h = engine._forward(w, ids[None], torch.arange(len(p))[None, None], cache)
        ours = engine._logits(w, h[:, :, -1])[0, 0]
        theirs = m(ids).logits[0, -1].float()
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)


def test_greedy_replies_match_hf_generate(model):
    m, tok = model
    m = m.float()
    prompts = sudoku_prompts(tok, 8)
    s = Sampling(do_sample=False, max_new_tokens=8)
    ours = PopulationEngine(m, tok, slots=1).generate(prompts, s, ("t",))
    theirs = HFEngine(m, tok).generate(prompts, s, ("t",))
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("do_sample", [False, True])
def test_a_member_decodes_the_same_alone_and_in_the_population(model, dtype, do_sample):
    m, tok = model
    m = m.to(dtype)
    members = 4
    pert = Perturber(m, rounding="nearest", revert="exact")
    prompts = sudoku_prompts(tok, 6)
    prompts.append(prompts[0][:-2] + prompts[1][-2:])  # shares all but its end with prompt 0
    together = PopulationEngine(m, tok, slots=members)
    for i in range(members):
        pert.apply(100 + i, 0.05 * (-1) ** i)
        together.capture(i)
        pert.revert()
    # rows of all members, interleaved, and members with different row counts; member 3's two
    # prompts share a longer prefix than the population's (computed once when it runs alone)
    rows = [(i, r) for r in range(len(prompts)) for i in range(members) if (r in (0, 6)) == (i == 3)]
    s = Sampling(do_sample=do_sample, temperature=1.0, top_p=0.95, top_k=50, max_new_tokens=8)
    replies = together.generate([prompts[r] for _, r in rows], s, ("t", 7), keys=[r for _, r in rows],
                                members=[i for i, _ in rows], logprobs=True)
    for i in range(members):
        mine = [k for k, (j, _) in enumerate(rows) if j == i]
        pert.apply(100 + i, 0.05 * (-1) ** i)
        alone = PopulationEngine(m, tok, slots=1, context=together.context)
        alone.capture(0)
        in_place = alone.generate([prompts[rows[k][1]] for k in mine], s, ("t", 7), keys=[rows[k][1] for k in mine],
                                  logprobs=True)  # the model's own (perturbed) weights
        one_slot = alone.generate([prompts[rows[k][1]] for k in mine], s, ("t", 7), keys=[rows[k][1] for k in mine],
                                  members=[0] * len(mine), logprobs=True)
        pert.revert()
        for k, a, b in zip(mine, in_place, one_slot):
            assert replies[k].token_ids == a.token_ids == b.token_ids
            assert replies[k].logprobs == a.logprobs == b.logprobs  # bit for bit
    if do_sample:  # the members' weights differ, and so do their replies somewhere
        assert len({tuple(replies[k].token_ids) for k in range(len(rows))}) > 1


def test_sampling_filters_are_transformers_warpers():
    torch.manual_seed(0)
    scores = torch.randn(16, 64) * 3
    scores[0, :5] = 2.0  # ties at the k-th score
    for k, p in [(20, 0.8), (5, 1.0), (0, 0.5), (64, 0.95)]:
        ours = filter_logits(scores, k, p)
        theirs = scores
        if 0 < k < scores.shape[-1]:
            theirs = TopKLogitsWarper(k)(None, theirs)
        if p < 1.0:
            theirs = TopPLogitsWarper(p)(None, theirs)
        assert torch.equal(ours.isinf(), theirs.isinf())


def test_noise_is_uniform_and_keyed_by_row():
    seeds = torch.tensor([1, 2, 1], dtype=torch.int64)
    u = uniform_noise(seeds, 0, 4096)
    assert 0 < u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.005
    assert torch.equal(u[0], u[2]) and not torch.equal(u[0], u[1])
    assert not torch.equal(uniform_noise(seeds, 1, 4096)[0], u[0])


def test_sampled_tokens_follow_the_softmax(model):
    """Gumbel-max over the hashed noise samples softmax(logits / T): frequencies over many rows."""
    m, tok = model
    engine = PopulationEngine(m.float(), tok, slots=1)
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(1, 20000, 4).contiguous()
    s = Sampling(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1)
    seeds = torch.arange(20000, dtype=torch.int64).view(1, -1) * 7919
    tokens = engine._next(logits, torch.zeros_like(logits, dtype=torch.bool), s, seeds, 0)
    freq = torch.bincount(tokens.flatten(), minlength=4).float() / tokens.numel()
    torch.testing.assert_close(freq, logits[0, 0].softmax(-1), atol=0.012, rtol=0)


def test_refuses_what_it_cannot_run(model, hybrid_model):
    m, tok = load_model_and_tokenizer(hybrid_model)
    with pytest.raises(ValueError, match="full-attention layers only"):
        PopulationEngine(m, tok, slots=2)
    m, tok = model
    engine = PopulationEngine(m, tok, slots=2, context=32)
    with pytest.raises(ValueError, match="exceeds the population engine's context"):
        engine.generate(sudoku_prompts(tok, 1), Sampling(do_sample=False), ("t",))
    with pytest.raises(RuntimeError, match="no captured weights"):
        PopulationEngine(m, tok, slots=2).generate(sudoku_prompts(tok, 1), Sampling(do_sample=False), ("t",),
                                                   members=[1])


@pytest.mark.parametrize("decoding", ["greedy", "sample"])
def test_es_generations_are_the_same_batched_and_member_by_member(smoke_model, decoding):
    """Two ES generations on Sudoku: every member's reward and tokens, and the weights after
    the update, are the same whether the members run together (batched) or one by one on the
    model perturbed in place (the per-member path) through the same engine."""
    from esopt.config import load_config
    from esopt.es import ESConfig, ESTrainer
    from esopt.es.schedule import SigmaSchedule
    from esopt.es.trainer import Member
    from esopt.hashing import weights_sha256
    from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks
    from esopt.spec.sudoku import SudokuEpisodes

    from conftest import SMOKE

    episodes = SudokuEpisodes.from_config(load_config(SMOKE))
    spec = EpisodeSpec.from_specs(episodes, 2, decoding)
    cfg = ESConfig(population=4, generations=2, alpha=0.01, sigma=SigmaSchedule("cosine", 0.02, 0.01, total=2),
                   antithetic=True)

    def run(batched: bool):
        m, tok = load_model_and_tokenizer(smoke_model)
        engine = PopulationEngine(m, tok, slots=cfg.population)

        def score(trajs, counters):
            return summarize(trajs)["mean_reward"], {"tokens": counters.get("generated_tokens", 0),
                                                     "actions": [[t.action for t in tr.turns] for tr in trajs]}

        def fitness(member: Member):
            counters = {}
            tasks = train_tasks(episodes, 2, 6, member.task_seed)
            return score(run_episodes(engine, tok, spec, 6, seed=member.task_seed, split="train", tasks=tasks,
                                      counters=counters), counters)

        class Batched:
            capture = engine.capture

            @staticmethod
            def evaluate(members):
                tasks = train_tasks(episodes, 2, 6, members[0].task_seed)
                counters = {}
                trajs = run_episodes(engine, tok, spec, 6, seed=members[0].task_seed, split="train",
                                     tasks=tasks * len(members), counters=counters,
                                     members=[k for k in range(len(members)) for _ in tasks])
                return [score(trajs[6 * k:6 * k + 6], counters[k]) for k in range(len(members))]

        trainer = ESTrainer(m, cfg, fitness, progress=False, batched=Batched() if batched else None)
        history = trainer.run()
        return [(g.rewards, g.member_info) for g in history.generations], weights_sha256(m)

    together, alone = run(batched=True), run(batched=False)
    assert together == alone
    # not vacuous: the members did differ, in what they played (their rewards can tie: the smoke
    # model a CPU builds is that CPU's, and on an Intel Xeon its greedy members tie at H* 2)
    assert any(len({json.dumps(i["actions"]) for i in info}) > 1 for _, info in together[0])


# ---- the low-rank variant (EGGROLL): esopt.es.lowrank and the engine's factored forward


def test_lowrank_perturbation_is_low_rank_reverts_and_replays(model):
    from esopt.es.history import History
    from esopt.es.lowrank import LowRankPerturber, make_perturber

    m, _ = model
    m = m.float()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    for revert in ("exact", "snapshot"):
        pert = LowRankPerturber(m, rank=2, revert=revert)
        pert.apply(5, 0.1)
        for n, p in m.named_parameters():
            delta = (p.detach() - before[n]).double()
            if p.dim() == 2:
                assert torch.linalg.matrix_rank(delta, rtol=1e-4) == 2, n
            else:
                assert (delta != 0).float().mean() > 0.9, n  # vectors: full-rank noise
        pert.revert()
        assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())
    # the update of G rank-2 members has rank up to 2G, and a history replays it
    pert = make_perturber(m, "lowrank", 2)
    pert.update([1, 2, 3], [0.01, -0.02, 0.03])
    w = m.model.layers[0].mlp.up_proj.weight
    assert torch.linalg.matrix_rank((w.detach() - before["model.layers.0.mlp.up_proj.weight"]).double(), rtol=1e-4) == 6
    after = {n: p.detach().clone() for n, p in m.named_parameters()}
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(before[n])
    h = History(run={"es": {"perturbation": "lowrank", "rank": 2, "update_rounding": "nearest"}})
    h.perturber(m).update([1, 2, 3], [0.01, -0.02, 0.03])
    assert all(torch.equal(p, after[n]) for n, p in m.named_parameters())


def test_lowrank_factored_forward_is_the_materialized_member(model):
    """EGGROLL's forward x Wᵀ + (x b) aᵀ gives the replies and (up to rounding) the logits of
    the member's weights W + σ·s·A Bᵀ/√r written into the model."""
    from esopt.es.lowrank import LowRankPerturber

    m, tok = model
    m = m.float()
    prompts = sudoku_prompts(tok, 6)
    factored = PopulationEngine(m, tok, slots=3, rank=2)
    materialized = PopulationEngine(m, tok, slots=3)
    pert = LowRankPerturber(m, rank=2, revert="snapshot")
    for k, (seed, scale) in enumerate([(11, 0.05), (11, -0.05), (12, 0.05)]):
        factored.capture_lowrank(k, seed, scale)
        pert.apply(seed, scale)
        materialized.capture(k)
        pert.revert()
    rows = [(k, r) for k in range(3) for r in range(len(prompts))]
    s = Sampling(do_sample=False, max_new_tokens=8)
    args = ([prompts[r] for _, r in rows], s, ("t",))
    a = factored.generate(*args, members=[k for k, _ in rows], logprobs=True)
    b = materialized.generate(*args, members=[k for k, _ in rows], logprobs=True)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    torch.testing.assert_close(torch.tensor([x for c in a for x in c.logprobs]),
                               torch.tensor([x for c in b for x in c.logprobs]), rtol=0, atol=1e-4)
    with pytest.raises(RuntimeError, match="captures members' factors"):
        factored.capture(0)


def test_lowrank_es_run_batched_records_and_replays(smoke_model):
    """A low-rank ES run on the factored engine: the history names the variant, and replaying
    it on the base model (esopt replay's path: history.perturber) ends at the run's weights."""
    from esopt.config import load_config
    from esopt.es import ESConfig, ESTrainer
    from esopt.es.schedule import SigmaSchedule
    from esopt.hashing import weights_sha256
    from esopt.runs.episodes import EpisodeSpec, run_episodes, summarize, train_tasks
    from esopt.spec.sudoku import SudokuEpisodes

    from conftest import SMOKE

    episodes = SudokuEpisodes.from_config(load_config(SMOKE))
    spec = EpisodeSpec.from_specs(episodes, 2, "sample")
    cfg = ESConfig(population=4, generations=2, alpha=0.05, sigma=SigmaSchedule("constant", 0.05, total=2),
                   antithetic=True, perturbation="lowrank", rank=2)
    m, tok = load_model_and_tokenizer(smoke_model)
    m = m.float()
    engine = PopulationEngine(m, tok, slots=4, rank=2)

    class Batched:
        capture_lowrank = engine.capture_lowrank

        @staticmethod
        def evaluate(members):
            tasks = train_tasks(episodes, 2, 6, members[0].task_seed)
            trajs = run_episodes(engine, tok, spec, 6, seed=members[0].task_seed, split="train",
                                 tasks=tasks * len(members), members=[k for k in range(len(members)) for _ in tasks])
            return [(summarize(trajs[6 * k:6 * k + 6])["mean_reward"], {}) for k in range(len(members))]

    history = ESTrainer(m, cfg, lambda member: (0.0, {}), progress=False, batched=Batched()).run()
    assert history.run["es"]["perturbation"] == "lowrank" and history.run["es"]["rank"] == 2
    assert any(g.updated for g in history.generations)
    final = weights_sha256(m)
    base, _ = load_model_and_tokenizer(smoke_model)
    base = base.float()
    history.replay(history.perturber(base))
    assert weights_sha256(base) == final
