"""Peak-memory measurement: what `esopt memory` reports is what a block really allocated."""

import torch

from esopt.runs.memory import PeakMemory, module_state_bytes, rss_bytes


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


def test_the_summary_takes_the_largest_rank_and_keeps_every_ranks_peak():
    from esopt.runs.memory import max_over_ranks, rank_peaks

    def measured(rank, state, above):
        return rank_peaks(rank, "cpu", state, PeakMemory("cpu", peak_above_start=above), wall_s=1.0 + rank)

    s = max_over_ranks([measured(1, 100, 900), measured(0, 120, 700)])
    # state and peak above load come from one rank (1: 1000 > 820), so they still add up
    assert (s["model_state_bytes"], s["peak_above_load_bytes"], s["peak_bytes"], s["peak_rank"]) == (100, 900, 1000, 1)
    assert s["ranks"] == 2 and [r["rank"] for r in s["per_rank"]] == [0, 1]
    assert s["per_rank"][0]["peak_bytes"] == 820 and s["per_rank"][0]["cuda_max_allocated_bytes"] is None


def test_grpo_memory_over_two_gloo_ranks_measures_each_ranks_shards(tmp_path, smoke_model):
    """`esopt memory --method grpo` as the pipeline launches it with rl.ranks 2: torchrun, the
    step sharded (FSDP2) with the KL reference, checkpointing and chunked logits; one summary."""
    import json
    import os
    import subprocess
    import sys

    from esopt.models.load import load_model_and_tokenizer
    from esopt.report.memory import load_memory

    from test_cli import write_config

    config = write_config(tmp_path, **{"rl.ranks": 2, "rl.kl_coef": 1e-3, "rl.gradient_checkpointing": True,
                                       "rl.logits_chunk": 8})
    out = tmp_path / "grpo.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "esopt.cli.main", "memory", "--method", "grpo", "--config", str(config),
                          "--model", str(smoke_model), "--out", str(out), "--threads", "1"],
                         capture_output=True, text=True, env=env, timeout=240)
    assert res.returncode == 0, res.stderr[-4000:]
    rec = json.loads(out.read_text())
    assert rec["ranks"] == 2 and [r["rank"] for r in rec["per_rank"]] == [0, 1]
    assert rec["peak_bytes"] == max(r["peak_bytes"] for r in rec["per_rank"])
    assert rec["peak_bytes"] == rec["model_state_bytes"] + rec["peak_above_load_bytes"]
    assert rec["step"]["episodes"] == 4 and rec["step"]["optimizer_steps"] == 2  # the global step, every rank's share
    # each rank holds its half of policy + reference (their shards; small buffers are replicated)
    model, _ = load_model_and_tokenizer(smoke_model, dtype="float32")
    full = 2 * module_state_bytes(model)
    assert rec["params"] == sum(p.numel() for p in model.parameters())
    for r in rec["per_rank"]:
        assert abs(r["model_state_bytes"] - full / 2) < 4096, (r["model_state_bytes"], full)
        assert r["peak_above_load_bytes"] > 0 and r["device"] == "cpu" and r["cuda_max_allocated_bytes"] is None
    assert load_memory([out]).peak_bytes[0] == rec["peak_bytes"]  # the report reads it


def test_the_report_reads_the_ranks_of_a_sharded_file_and_one_of_an_older_file(tmp_path):
    import json

    from esopt.report.memory import load_memory, memory_table, plot_memory

    one = {"method": "es", "model": "m", "device": "cpu", "measure": "rss", "model_state_bytes": 100,
           "peak_above_load_bytes": 20, "peak_bytes": 120}  # written before files had `ranks`
    two = {**one, "method": "grpo", "peak_bytes": 600, "peak_above_load_bytes": 500, "ranks": 2, "peak_rank": 1,
           "per_rank": []}
    for rec in (one, two):
        (tmp_path / f"{rec['method']}.json").write_text(json.dumps(rec))
    t = memory_table(load_memory([tmp_path / "es.json", tmp_path / "grpo.json"]))
    assert t.ranks.tolist() == [1, 2] and t.set_index("method").loc["grpo", "ratio_to_es"] == 5.0
    plot_memory(t, tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 1000
