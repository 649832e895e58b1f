"""es.update_rounding (nearest, stochastic, fp32_master) and the fidelity metrics of updates and perturbations."""

import math

import pytest
import torch

from esopt.es import ESConfig, ESTrainer, History, Perturber, SigmaSchedule
from esopt.es.distributed import Collective
from esopt.es.fidelity import Fidelity, param_groups
from esopt.es.noise import noise_chunks
from esopt.es.rounding import ROUNDINGS, stochastic_round
from esopt.hashing import weights_sha256

from test_es_optimizer import bitwise_equal, quadratic_fitness, small_net, snapshot

BF16_SPACING_AT_1 = 2.0**-7  # between 1.0 and the next bf16 value


def config(rounding, generations=4, population=8, seed=4):
    return ESConfig(population=population, generations=generations, alpha=0.05, seed=seed, antithetic=True,
                    sigma=SigmaSchedule("cosine", 0.05, 0.01, total=generations), update_rounding=rounding)


def bf16_trainer(rounding, tmp_path=None, collective=None, generations=4):
    net = small_net(torch.bfloat16, seed=2)
    target = torch.full((sum(p.numel() for p in net.parameters()),), 0.1)
    return net, ESTrainer(net, config(rounding, generations), quadratic_fitness(net, target), progress=False,
                          history_path=None if tmp_path is None else tmp_path / "h.json",
                          collective=collective or Collective())


def test_stochastic_rounding_is_unbiased_and_deterministic_given_the_seed():
    n = 200_000
    # values a quarter and a tenth of the way from 1.0 to the next bf16 value, and their negatives
    x = torch.tensor([1 + BF16_SPACING_AT_1 / 4, 1 + BF16_SPACING_AT_1 / 10, -(1 + BF16_SPACING_AT_1 / 4)]).repeat(n)
    draw = lambda seed: stochastic_round(x.clone(), torch.bfloat16, torch.rand(x.numel(), generator=torch.Generator().manual_seed(seed)))
    r = draw(0)
    assert torch.equal(r.view(torch.int16), draw(0).view(torch.int16))  # the seed decides every bit
    assert not torch.equal(r, draw(1))
    near = x.to(torch.bfloat16).float()
    up = torch.nextafter(x.to(torch.bfloat16), torch.tensor(float("inf"), dtype=torch.bfloat16).expand(x.numel())).float()
    down = torch.nextafter(x.to(torch.bfloat16), torch.tensor(-float("inf"), dtype=torch.bfloat16).expand(x.numel())).float()
    assert bool(((r.float() == near) | (r.float() == up) | (r.float() == down)).all())  # a neighbour, never further
    mean, want = r.float().view(n, 3).mean(0), x[:3]
    # nearest rounding gives 1.0 (a bias of spacing/4 and /10); stochastic is within 5 standard errors
    stderr = BF16_SPACING_AT_1 * 0.5 / math.sqrt(n)
    assert torch.allclose(mean.double(), want.double(), atol=5 * stderr, rtol=0)
    assert (near[:3] - want).abs().min() > 10 * 5 * stderr  # the bias stochastic rounding removes is visible


def test_stochastic_update_is_replayable_bit_for_bit_and_depends_on_the_seeds():
    def updated(seeds):
        net = small_net(torch.bfloat16)
        Perturber(net, rounding="stochastic").update(seeds, [1e-3, -1e-3])
        return snapshot(net)

    assert bitwise_equal(updated([5, 6]), updated([5, 6]))
    assert not bitwise_equal(updated([5, 6]), updated([7, 8]))


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_replay_of_each_rounding_is_bit_exact(rounding, tmp_path):
    net, tr = bf16_trainer(rounding, tmp_path)
    tr.run()
    history = History.load(tmp_path / "h.json")  # what the run wrote is all the replay gets
    assert history.update_rounding == rounding and history.run["es"]["update_rounding"] == rounding
    rebuilt = small_net(torch.bfloat16, seed=2)
    history.replay(Perturber(rebuilt, rounding=history.update_rounding))
    assert weights_sha256(rebuilt) == weights_sha256(net) != weights_sha256(small_net(torch.bfloat16, seed=2))
    other = next(r for r in ROUNDINGS if r != rounding)
    with pytest.raises(ValueError, match="rounded its updates"):
        history.replay(Perturber(small_net(torch.bfloat16, seed=2), rounding=other))


def test_the_roundings_differ_in_bf16_and_agree_in_fp32():
    def final(rounding, dtype):
        net = small_net(dtype, seed=2)
        p = Perturber(net, rounding=rounding)
        for g in range(3):
            p.update([10 * g + 1, 10 * g + 2], [3e-4, -2e-4])
        return weights_sha256(net)

    assert len({final(r, torch.bfloat16) for r in ROUNDINGS}) == len(ROUNDINGS)
    assert len({final(r, torch.float32) for r in ROUNDINGS}) == 1


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_revert_is_bit_exact_with_each_rounding(rounding):
    net = small_net(torch.bfloat16)
    p = Perturber(net, rounding=rounding)
    for g in range(5):
        p.update([g, g + 100], [2e-3, -1e-3])
        before = snapshot(net)
        master = {k: v.clone() for k, v in p.master.flat.items()} if p.master else {}
        for s in range(4):
            p.apply(1000 * g + s, 0.01)
            p.revert()
        assert bitwise_equal(before, snapshot(net))
        assert all(torch.equal(master[k], p.master.flat[k]) for k in master)  # perturbations never touch it


def intended_total(net, updates):
    """Σ_t Σ_i c_i ε(seed_i) per parameter, dense fp32: what the updates mean."""
    out = {}
    for name, p in net.named_parameters():
        total = torch.zeros(p.numel())
        for seeds, coefs in updates:
            for s, c in zip(seeds, coefs):
                total += c * next(noise_chunks(s, name, p.numel(), p.device))[2]
        out[name] = total
    return out


def test_fp32_master_and_stochastic_keep_small_updates_that_nearest_loses():
    # LayerNorm gains at 1.0 and steps of 5e-5·ε per generation, under 1% of the bf16 spacing
    # there, in one direction (seed 1's noise) with other member seeds each generation (the
    # trainer's seeds differ every generation; the rounding uniforms follow them)
    updates = [([1, 1000 + g], [5e-5, 0.0]) for g in range(300)]
    name = "2.weight"
    want = intended_total(small_net(torch.bfloat16), updates)[name]
    assert want.abs().mean() > BF16_SPACING_AT_1  # together they are a step bf16 can hold
    moved = {}
    for rounding in ROUNDINGS:
        net = small_net(torch.bfloat16)
        p = Perturber(net, rounding=rounding)
        for seeds, coefs in updates:
            p.update(seeds, coefs)
        moved[rounding] = dict(net.named_parameters())[name].detach().float() - 1.0
        if rounding == "fp32_master":
            # the master holds the sum up to fp32 rounding: half an fp32 spacing at 1.0 per update
            assert torch.allclose(p.master.flat[name] - 1.0, want, rtol=0, atol=len(updates) * 2.0**-24)
    cos = lambda a: float(torch.nn.functional.cosine_similarity(a, want, dim=0))
    assert torch.count_nonzero(moved["nearest"]) == 0  # every update lost
    assert cos(moved["fp32_master"]) > 0.9 and cos(moved["stochastic"]) > 0.5


class _RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n))


class _TinyLM(torch.nn.Module):
    """The layout of an HF causal LM: tied embedding / lm_head, norms by class and by name."""

    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(11, 4)
        self.q_proj = torch.nn.Linear(4, 4)
        self.input_layernorm = _RMSNorm(4)
        self.post_attention_layernorm = torch.nn.LayerNorm(4)
        self.lm_head = torch.nn.Linear(4, 11, bias=False)
        self.lm_head.weight = self.embed_tokens.weight


def test_parameter_groups_of_a_causal_lm_layout():
    assert param_groups(_TinyLM()) == {
        "embed_tokens.weight": "embedding", "q_proj.weight": "linear", "q_proj.bias": "linear",
        "input_layernorm.weight": "norm", "post_attention_layernorm.weight": "norm",
        "post_attention_layernorm.bias": "norm",
    }


def test_fidelity_on_a_hand_computable_case():
    old = torch.tensor([1.0, 1.0, 0.0, 0.5], dtype=torch.bfloat16)
    intended = torch.tensor([1e-4, 0.5, 2.0**-10, 0.0])
    new = (old.float() + intended).to(torch.bfloat16)  # [1, 1.5, 2^-10, 0.5]: the first step is lost
    f = Fidelity()
    f.add("norm", old, new, intended)
    realized_dot = 0.5 * 0.5 + 2.0**-20
    cos = realized_dot / math.sqrt((0.5**2 + 2.0**-20) * (1e-4**2 + 0.5**2 + 2.0**-20))
    got = f.summary()["norm"]
    assert got["changed"] == 0.5 and got["cosine"] == pytest.approx(cos, rel=1e-6)
    f.add("linear", old, old, intended)  # nothing changed: no step in δ's direction
    assert f.summary()["linear"] == {"cosine": 0.0, "changed": 0.0}


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_update_fidelity_matches_a_dense_reference(rounding):
    net = small_net(torch.bfloat16)
    p = Perturber(net, rounding=rounding)
    before = {k: v.float() for k, v in snapshot(net).items()}
    seeds, coefs = [1, 2, 3], [2e-3, -1e-3, 5e-4]
    f = Fidelity()
    p.update(seeds, coefs, fidelity=f)
    want = intended_total(net, [(seeds, coefs)])
    after = {k: v.float() for k, v in snapshot(net).items()}
    for group in ("linear", "norm", "embedding"):
        names = [n for n, g in p.groups.items() if g == group]
        r = torch.cat([(after[n] - before[n]).view(-1) for n in names])
        i = torch.cat([want[n] for n in names])
        got = f.summary()[group]
        assert got["changed"] == int(torch.count_nonzero(r)) / r.numel()
        assert got["cosine"] == pytest.approx(float(torch.nn.functional.cosine_similarity(r, i, dim=0)), abs=1e-4)


def test_generation_records_carry_fidelity_per_group_and_metrics_flatten_it():
    net = small_net(torch.bfloat16, seed=2)
    episodes = {"success": 0.5, "mean_turns": 3.0}  # what an agent's fitness reports besides the reward
    tr = ESTrainer(net, config("nearest", generations=2), lambda m: (float(m.index % 3), episodes), progress=False)
    rec = tr.run().generations[-1]
    assert set(rec.fidelity) == {"update", "perturbation"}
    for kind in rec.fidelity.values():
        assert set(kind) == {"linear", "norm", "embedding"}
        assert all(0.0 <= v["changed"] <= 1.0 and -1.0 <= v["cosine"] <= 1.0 for v in kind.values())
    m = rec.metrics()
    assert m["update_cosine_linear"] == rec.fidelity["update"]["linear"]["cosine"]
    assert m["perturbation_changed_norm"] == rec.fidelity["perturbation"]["norm"]["changed"]


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_resume_after_interruption_matches_uninterrupted_run(tmp_path, rounding):
    _, tr = bf16_trainer(rounding, tmp_path, generations=6)
    for t in range(3):  # an interrupted run: 3 generations saved
        tr.history.generations.append(tr.step(t))
        tr.history.save(tmp_path / "h.json")
    resumed, tr2 = bf16_trainer(rounding, tmp_path, generations=6)
    tr2.run()  # rebuilds the weights (and the fp32 master) from the base by replay, then continues
    (tmp_path / "h.json").unlink()
    whole, tr3 = bf16_trainer(rounding, tmp_path, generations=6)
    tr3.run()
    assert weights_sha256(resumed) == weights_sha256(whole)
    if rounding == "fp32_master":
        assert all(torch.equal(tr2.perturber.master.flat[k], tr3.perturber.master.flat[k]) for k in tr3.perturber.master.flat)


class _OtherRank(Collective):
    """Rank `rank` of 2 in one process; the other rank's rewards come from the same fitness."""

    def __init__(self, rank, rewards):
        super().__init__(rank=rank, world_size=2)
        self.rewards = rewards

    def all_gather(self, obj):
        other = {i: (self.rewards(i), {}) for i in range(1 - self.rank, 8, 2)}
        return [obj, other] if self.rank == 0 else [other, obj]


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_rank_applies_the_same_update(rounding):
    rewards = lambda i: float((i * 7) % 5)  # a fitness of the member alone, so every rank can know it
    hashes = []
    for collective in (Collective(), _OtherRank(0, rewards), _OtherRank(1, rewards)):
        net = small_net(torch.bfloat16, seed=2)
        ESTrainer(net, config(rounding), lambda m: (rewards(m.index), {}), progress=False, collective=collective).run()
        hashes.append(weights_sha256(net))
    assert len(set(hashes)) == 1


def test_es_config_names_the_rounding_and_reads_it_from_settings():
    with pytest.raises(ValueError, match="update_rounding"):
        config("truncate")
    es = {"generations": 2, "alpha": 0.1, "sigma": {"schedule": "constant", "sigma0": 0.01}, "antithetic": False,
          "normalization": "zscore", "update_rounding": "nearest"}
    assert ESConfig.from_settings(es, 4, 0).update_rounding == "nearest"
    assert ESConfig.from_settings({**es, "update_rounding": "fp32_master"}, 4, 0).update_rounding == "fp32_master"


def test_a_history_from_before_the_option_resumes_as_nearest(tmp_path):
    _, tr = bf16_trainer("nearest", tmp_path, generations=4)
    for t in range(2):
        tr.history.generations.append(tr.step(t))
    del tr.history.run["es"]["update_rounding"]  # as histories were written before es.update_rounding
    tr.history.save(tmp_path / "h.json")
    resumed, tr2 = bf16_trainer("nearest", tmp_path, generations=4)
    tr2.run()
    (tmp_path / "h.json").unlink()
    whole, tr3 = bf16_trainer("nearest", tmp_path, generations=4)
    tr3.run()
    assert weights_sha256(resumed) == weights_sha256(whole)
    tr.history.save(tmp_path / "h.json")  # the old history again: another rounding may not resume it
    with pytest.raises(ValueError, match="different run"):
        bf16_trainer("stochastic", tmp_path, generations=4)[1].run()
