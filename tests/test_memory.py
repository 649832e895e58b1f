"""Peak-memory measurement: what `esopt memory` reports is what a block really allocated."""

import torch

from esopt.eval.memory import PeakMemory, module_state_bytes, rss_bytes


def test_peak_sees_a_transient_allocation_that_is_already_freed():
    with PeakMemory("cpu") as pm:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del x
    assert pm.measure in ("rss", "rss_sampled")
    assert 60 * 2**20 <= pm.peak_above_start < 200 * 2**20


def test_peak_of_a_block_that_allocates_nothing_is_small():
    before = rss_bytes()
    with PeakMemory("cpu") as pm:
        sum(range(1000))
    assert pm.peak_above_start < 8 * 2**20 and rss_bytes() - before < 8 * 2**20


def test_model_state_counts_tied_weights_once():
    emb = torch.nn.Embedding(100, 16)
    head = torch.nn.Linear(16, 100, bias=False)
    head.weight = emb.weight  # tied, as in the tiny model
    model = torch.nn.ModuleDict({"emb": emb, "head": head, "norm": torch.nn.LayerNorm(16)})
    assert module_state_bytes(model) == (100 * 16 + 16 + 16) * 4
    assert module_state_bytes(model, None, model) == module_state_bytes(model)


def test_peak_sees_an_allocation_that_reuses_memory_the_allocator_kept():
    # Many mid-sized frees leave resident free heap that a later 64 MiB block can reuse.
    blocks = [torch.ones(200_000) for _ in range(600)]
    del blocks
    with PeakMemory("cpu") as pm:
        x = torch.ones(64 * 2**20 // 4)
        del x
    assert 60 * 2**20 <= pm.peak_above_start < 200 * 2**20
