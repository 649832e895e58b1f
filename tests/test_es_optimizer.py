"""The ES optimizer: perturbation, exact revert, update formula, normalization, schedules."""

import logging
import math

import pytest
import torch

from esopt.es import ESConfig, ESTrainer, Perturber, SigmaSchedule, member_seeds, normalize_rewards, perturb
from esopt.es.noise import noise_chunks
from esopt.hashing import weights_sha256


def small_net(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Embedding(37, 16), torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16, bias=False))
    net[1].weight.data[:3] = 0.0  # exact zeros: the hardest case for an exact revert
    return net.to(dtype)


def snapshot(m):
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def bitwise_equal(a, b):
    ints = {2: torch.int16, 4: torch.int32}
    return all(torch.equal(a[k].view(ints[a[k].element_size()]), b[k].view(ints[b[k].element_size()])) for k in a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sigma", [1e-3, 0.05, 1.0])
def test_revert_is_bit_exact_after_100_cycles(dtype, sigma):
    net = small_net(dtype)
    before = snapshot(net)
    p = Perturber(net, chunk=100)  # small chunks: exercise chunk boundaries
    for i in range(100):
        p.apply(seed=1000 + i, scale=sigma * (-1) ** i)
        assert not bitwise_equal(before, snapshot(net))
        p.revert()
    assert bitwise_equal(before, snapshot(net))


def test_apply_and_revert_are_idempotent_and_exclusive():
    net = small_net()
    p = Perturber(net)
    before = snapshot(net)
    p.revert()  # clean: no-op
    assert bitwise_equal(before, snapshot(net))
    p.apply(1, 0.1)
    once = snapshot(net)
    p.apply(1, 0.1)  # the active perturbation again: no-op
    assert bitwise_equal(once, snapshot(net))
    with pytest.raises(RuntimeError, match="still active"):
        p.apply(2, 0.1)
    with pytest.raises(RuntimeError, match="while a perturbation is active"):
        p.update([1], [0.1])
    p.revert()
    p.revert()
    assert bitwise_equal(before, snapshot(net))


def test_exact_revert_keeps_only_a_fraction_of_the_model():
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 512, bias=False).to(torch.bfloat16)
    torch.nn.init.normal_(lin.weight, std=0.02)
    p = Perturber(lin)
    p.apply(3, 0.05 * 0.02)  # σ = 0.05·std(w), the paper's regime
    assert 0 < p.fixup_fraction() < 0.15
    assert 0 < p.held_bytes() < 0.01 * lin.weight.nbytes  # measured 0.69%, ~0.11 bits per element
    p.revert()
    assert p.held_bytes() == 0 and p.fixup_fraction() == 0.0


class Vector(torch.nn.Module):
    def __init__(self, values):
        super().__init__()
        self.w = torch.nn.Parameter(values, requires_grad=False)


def edge_values(dtype, n=200, seed=0):
    """±0, subnormals, values at and next to powers of two, tiny and ordinary weights."""
    g = torch.Generator().manual_seed(seed)
    fin = torch.finfo(dtype)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    pow2 = (sign * torch.exp2(torch.randint(-12, 2, (n,), generator=g).float())).to(dtype)
    parts = [
        torch.tensor([0.0, -0.0] * (n // 2), dtype=dtype),
        (torch.rand(n, generator=g) * sign * fin.smallest_normal).to(dtype),  # subnormals
        torch.full((n // 4,), fin.smallest_normal * 2**-30, dtype=torch.float64).to(dtype),  # rounds to +0
        pow2,
        torch.nextafter(pow2, torch.zeros_like(pow2)),  # just below a binade boundary
        torch.nextafter(pow2, 2 * pow2),  # just above
        (torch.randn(n, generator=g) * 1e-5).to(dtype),
        (torch.randn(4 * n, generator=g) * 0.02).to(dtype),
    ]
    values = torch.cat(parts)
    return values[torch.randperm(values.numel(), generator=g)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sigma", [2.5e-4, 1e-3, 0.05, 1.0])  # 1.0: |δ| ≫ |θ| everywhere
def test_edge_values_perturb_to_round_of_sum_and_revert_bit_exact(dtype, sigma, monkeypatch):
    monkeypatch.setitem(perturb.PIECE, "cpu", 37)  # pieces inside chunks, neither dividing the other
    net = Vector(edge_values(dtype))
    before = snapshot(net)
    p = Perturber(net, chunk=101)
    for i in range(6):
        seed, scale = 77 + i, sigma * (-1) ** i
        p.apply(seed, scale)
        eps = torch.cat([e for _, _, e in noise_chunks(seed, "w", net.w.numel(), net.w.device, chunk=101)])
        expected = (before["w"].float() + scale * eps).to(dtype)  # θ' = round(θ + δ), as ever
        assert bitwise_equal({"w": net.w.detach()}, {"w": expected})
        p.revert()
        assert bitwise_equal(before, snapshot(net))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_non_finite_values_revert_bit_exact(dtype):
    big = torch.finfo(dtype).max
    nan_bits = {torch.bfloat16: 0x7FC1, torch.float16: 0x7E01, torch.float32: 0x7FC00001}[dtype]
    nan = torch.tensor([nan_bits], dtype=torch.int16 if dtype.itemsize == 2 else torch.int32).view(dtype)
    assert nan.isnan().all()  # a NaN with a payload
    values = torch.cat([
        torch.tensor([float("inf"), -float("inf"), float("nan"), big, -big], dtype=dtype),
        nan,
        edge_values(dtype, n=20),
    ])
    net = Vector(values)
    before = snapshot(net)
    p = Perturber(net)
    for i, sigma in enumerate([1e-3, 1.0, 1e4]):
        p.apply(i, sigma)
        p.revert()
        assert bitwise_equal(before, snapshot(net))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sigma", [1e-3, 0.05])
def test_preimage_intervals_match_brute_force(dtype, sigma):
    """The interval {x : round(x + δ) = θ'} that revert infers, against all values of the dtype."""
    fmt = perturb._FORMATS[dtype]
    keys = torch.arange(-1 - fmt.max_key, fmt.max_key + 1, dtype=torch.int32)
    every = perturb._from_key(keys, dtype, fmt).float()  # all finite values, in order
    theta = edge_values(dtype, n=100, seed=1)
    delta = torch.randn(theta.numel(), generator=torch.Generator().manual_seed(2)) * sigma
    t = perturb._perturbed(theta, delta)
    lo, size = perturb._preimage(t, delta, fmt)
    true_lo, true_size = [], []
    for i in range(0, theta.numel(), 64):
        hit = (every[None, :] + delta[i : i + 64, None]).to(dtype) == t[i : i + 64, None]
        true_lo.append(keys[hit.int().argmax(1)])
        true_size.append(hit.sum(1))
    true_lo, true_size = torch.cat(true_lo), torch.cat(true_size)
    # exact wherever the interval is narrow; wide ones (θ tiny against δ, where x + δ
    # rounds in fp32 too) may be off by a few steps at their ends, which costs nothing
    narrow = true_size <= 64
    assert narrow.sum() > 500 and (true_size[narrow] > 1).sum() > 50
    assert torch.equal(lo[narrow].long(), true_lo[narrow].long())
    assert torch.equal(size[narrow].long(), true_size[narrow].long())


def test_each_tensor_gets_its_own_noise():
    a = next(noise_chunks(7, "layer.0.weight", 64, torch.device("cpu")))[2]
    b = next(noise_chunks(7, "layer.1.weight", 64, torch.device("cpu")))[2]
    a2 = next(noise_chunks(7, "layer.0.weight", 64, torch.device("cpu")))[2]
    assert torch.equal(a, a2)
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1]) < 0.5


def test_perturbation_adds_sigma_times_seeded_noise():
    net = small_net()
    p = Perturber(net)
    before = snapshot(net)
    p.apply(11, 0.01)
    name, param = p.params[1]
    eps = torch.cat([e for _, _, e in noise_chunks(11, name, param.numel(), param.device)])
    assert torch.allclose(param.detach().view(-1), before[name].view(-1) + 0.01 * eps, atol=1e-6)
    p.revert()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_update_is_bitwise_the_fp32_accumulation_rounded_once(dtype):
    net = Vector(edge_values(dtype))
    before = net.w.detach().clone()
    seeds, coefs = [5, 6, 7], [3e-4, -1e-3, 2e-4]
    Perturber(net, chunk=101).update(seeds, coefs)
    acc = None  # the reference order of operations: c_0·ε_0, then + c_i·ε_i, then θ + acc
    for s, c in zip(seeds, coefs):
        eps = torch.cat([e for _, _, e in noise_chunks(s, "w", before.numel(), before.device, chunk=101)])
        acc = eps.mul_(c) if acc is None else acc.add_(eps, alpha=c)
    assert bitwise_equal({"w": net.w.detach()}, {"w": (before.float() + acc).to(dtype)})


def test_update_matches_dense_reference():
    net = small_net()
    before = {k: v.double() for k, v in snapshot(net).items()}
    seeds, coefs = [5, 6, 7, 8], [0.3, -0.1, 0.05, -0.25]
    Perturber(net, chunk=50).update(seeds, coefs)
    for name, param in net.named_parameters():
        ref = before[name].view(-1).clone()
        for s, c in zip(seeds, coefs):
            eps = torch.cat([e for _, _, e in noise_chunks(s, name, param.numel(), param.device, chunk=50)]).double()
            ref += c * eps
        assert torch.allclose(param.detach().double().view(-1), ref, atol=1e-6), name


def test_zscore_uses_population_std():
    r = [1.0, 2.0, 3.0, 6.0]
    z = normalize_rewards(r)
    mu = sum(r) / 4
    s = math.sqrt(sum((x - mu) ** 2 for x in r) / 4)  # ddof 0
    assert z == pytest.approx([(x - mu) / (s + 1e-8) for x in r])


def test_centered_ranks_share_ties():
    assert normalize_rewards([0.2, 5.0, 0.2, -1.0], "centered_rank") == pytest.approx([0.0, 0.5, 0.0, -0.5])


def test_all_equal_rewards_give_no_update_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert normalize_rewards([0.5] * 6) == [0.0] * 6
    assert "no update" in caplog.text


def test_bad_normalization_is_named():
    with pytest.raises(ValueError, match="'rank'"):
        normalize_rewards([1, 2], "rank")


def test_cosine_schedule_has_exact_endpoints_and_decreases():
    s = SigmaSchedule("cosine", 1e-3, 2.5e-4, total=100)
    values = [s(t) for t in range(100)]
    assert values[0] == 1e-3 and values[-1] == 2.5e-4
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert s(50) == pytest.approx(2.5e-4 + (1e-3 - 2.5e-4) * (1 + math.cos(math.pi * 50 / 99)) / 2)
    assert SigmaSchedule("cosine", 1e-3, 0.0, total=10)(9) == 0.0  # test-time ES ends unperturbed
    assert {SigmaSchedule("constant", 3e-3, total=5)(t) for t in range(5)} == {3e-3}


def test_antithetic_members_come_in_mirrored_pairs():
    cfg = ESConfig(population=6, generations=2, alpha=0.1, sigma=SigmaSchedule("constant", 0.1, total=2), antithetic=True, seed=3)
    seeds, signs = member_seeds(cfg, 0)
    assert seeds[0::2] == seeds[1::2] and signs == [1, -1] * 3
    assert len(set(seeds)) == 3 and member_seeds(cfg, 1)[0] != seeds


def quadratic_fitness(net, target):
    def fitness(member):
        w = torch.cat([p.detach().float().view(-1) for p in net.parameters()])
        return -float(((w - target) ** 2).sum()), {}
    return fitness


def test_es_reduces_a_quadratic_loss_and_is_deterministic():
    def run(revert="exact"):
        net = small_net(dtype=torch.bfloat16, seed=1)
        target = torch.zeros(sum(p.numel() for p in net.parameters()))
        cfg = ESConfig(population=20, generations=30, alpha=0.05, sigma=SigmaSchedule("cosine", 0.05, 0.01, total=30), antithetic=True, seed=0)
        tr = ESTrainer(net, cfg, quadratic_fitness(net, target), progress=False, revert=revert)
        h = tr.run()
        return h, weights_sha256(net)

    h1, w1 = run()
    h2, w2 = run()
    h3, w3 = run("snapshot")  # another revert, the same run bit for bit
    assert w1 == w2 == w3 and [g.rewards for g in h1.generations] == [g.rewards for g in h2.generations]
    assert [g.rewards for g in h3.generations] == [g.rewards for g in h1.generations]
    first, last = h1.generations[0].rewards, h1.generations[-1].rewards
    assert max(last) > max(first)


def test_every_member_sees_the_same_task_batch():
    net = small_net()
    seen = []
    cfg = ESConfig(population=4, generations=2, alpha=0.1, sigma=SigmaSchedule("constant", 0.01, total=2), seed=0)
    ESTrainer(net, cfg, lambda m: (seen.append((m.generation, m.task_seed)) or float(m.index), {}), progress=False).run()
    assert len({s for g, s in seen if g == 0}) == 1 and len({s for g, s in seen if g == 1}) == 1
    assert seen[0][1] != seen[-1][1]


def test_resume_replays_history_to_identical_weights(tmp_path):
    def trainer(gens_to_run):
        net = small_net(seed=2)
        target = torch.full((sum(p.numel() for p in net.parameters()),), 0.1)
        cfg = ESConfig(population=8, generations=6, alpha=0.05, sigma=SigmaSchedule("cosine", 0.05, 0.01, total=6), seed=4)
        return net, ESTrainer(net, cfg, quadratic_fitness(net, target), history_path=tmp_path / "h.json", progress=False)

    net, tr = trainer(6)
    for t in range(3):  # an interrupted run: 3 generations saved
        tr.history.generations.append(tr.step(t))
        tr.history.save(tmp_path / "h.json")
    net2, tr2 = trainer(6)
    tr2.run()  # resumes at generation 3
    (tmp_path / "h.json").unlink()
    net3, tr3 = trainer(6)
    tr3.run()  # uninterrupted
    assert weights_sha256(net2) == weights_sha256(net3)


def test_resume_refuses_a_history_of_another_run(tmp_path):
    net = small_net()
    mk = lambda seed: ESTrainer(net, ESConfig(population=4, generations=2, alpha=0.1, sigma=SigmaSchedule("constant", 0.01, total=2), seed=seed),
                                lambda m: (float(m.index), {}), history_path=tmp_path / "h.json", progress=False)
    mk(0).run()
    with pytest.raises(ValueError, match="different run"):
        mk(1).run()


def test_continue_from_an_earlier_sittings_history(tmp_path, caplog):
    """continue_from (a published partial run): this run's history is continued to the weights
    of an uninterrupted run; another run's is skipped with a warning, never an error."""
    from esopt.es.history import History

    def trainer(seed, path):
        net = small_net(seed=2)
        target = torch.full((sum(p.numel() for p in net.parameters()),), 0.1)
        cfg = ESConfig(population=8, generations=4, alpha=0.05, sigma=SigmaSchedule("cosine", 0.05, 0.01, total=4), seed=seed)
        return net, ESTrainer(net, cfg, quadratic_fitness(net, target), history_path=path, progress=False)

    net, tr = trainer(4, tmp_path / "whole.json")
    whole = tr.run()
    History(whole.run, whole.generations[:2]).save(tmp_path / "partial.json")  # a sitting stopped after 2

    net2, tr2 = trainer(4, tmp_path / "next" / "h.json")
    tr2.continue_from = tmp_path / "partial.json"
    with caplog.at_level(logging.INFO, logger="esopt.es.trainer"):
        tr2.run()
    assert "continued from" in caplog.text and "after 2 generations" in caplog.text
    assert weights_sha256(net2) == weights_sha256(net)
    assert len(History.load(tmp_path / "next" / "h.json").generations) == 4
    assert tr2.continued["generations"] == 2

    # killed one generation after it continued: the resume from its own history still says so
    net4, tr4 = trainer(4, tmp_path / "killed" / "h.json")
    tr4.continue_from = tmp_path / "partial.json"
    done = tr4.resume()
    tr4.history.generations.append(tr4.step(done))
    tr4.history.save(tmp_path / "killed" / "h.json")
    net5, tr5 = trainer(4, tmp_path / "killed" / "h.json")
    tr5.continue_from = tmp_path / "partial.json"
    tr5.run()
    assert tr5.continued == tr4.continued == tr2.continued and weights_sha256(net5) == weights_sha256(net)

    caplog.clear()
    net3, tr3 = trainer(5, tmp_path / "other" / "h.json")  # another run: its own seed stream
    tr3.continue_from = tmp_path / "partial.json"
    with caplog.at_level(logging.WARNING, logger="esopt.es.trainer"):
        assert len(tr3.run().generations) == 4
    assert "not continuing" in caplog.text and "different run" in caplog.text
    assert [g.seeds for g in History.load(tmp_path / "other" / "h.json").generations] != [g.seeds for g in whole.generations]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_snapshot_revert_perturbs_alike_and_restores_bit_for_bit(dtype):
    """es.revert snapshot: the same perturbed weights and fidelity as the exact revert, the
    base back bit for bit, and a change made between members (an update) is what it restores."""
    from esopt.es.fidelity import Fidelity

    a, b = small_net(dtype), small_net(dtype)
    exact, snap = Perturber(a, chunk=100), Perturber(b, chunk=100, revert="snapshot")
    base = snapshot(b)
    for i, sigma in enumerate([1e-3, 0.05, 1.0]):
        fa, fb = Fidelity(), Fidelity()
        exact.apply(7 + i, sigma, fidelity=fa)
        snap.apply(7 + i, sigma, fidelity=fb)
        assert bitwise_equal(snapshot(a), snapshot(b)) and fa.summary() == fb.summary()
        assert snap.fixup_fraction() == 1.0 and snap.held_bytes() == sum(p.nbytes for p in b.parameters())
        exact.revert()
        snap.revert()
        assert bitwise_equal(base, snapshot(b)) and snap.held_bytes() == 0
    snap.update([1, 2], [0.01, -0.02])
    exact.update([1, 2], [0.01, -0.02])
    updated = snapshot(b)
    snap.apply(9, 0.1)
    snap.revert()
    assert bitwise_equal(updated, snapshot(b)) and bitwise_equal(snapshot(a), updated)


def test_revert_auto_is_exact_on_cpu_and_unknown_modes_are_refused():
    from esopt.es.perturb import resolve_revert

    assert resolve_revert("auto", torch.device("cpu")) == "exact"
    assert resolve_revert("auto", torch.device("cuda", 0)) == "snapshot"
    assert Perturber(small_net(), revert="auto").revert_mode == "exact"
    with pytest.raises(ValueError, match="es.revert"):
        Perturber(small_net(), revert="copy")
