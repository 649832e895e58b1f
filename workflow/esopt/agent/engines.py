"""Opening the rollout engine a config names: Hugging Face generate on the model in
memory, the population engine (every ES member's episodes in one batched forward, for
small models; esopt.agent.population), or vLLM (the optional extra) over the saved model
directory. Kept apart from
esopt.agent.engine, the interface both implement, so that neither imports the other."""

from __future__ import annotations

from typing import Any

import torch


def hf_model_device(settings: dict[str, Any]) -> str | None:
    """Where a job loads the HF copy of the model for engine settings (esopt.config.engine_settings):
    the host (cpu) when the engine is vLLM, which refuses to start unless the GPU's free memory
    covers its gpu_memory_utilization share (the copy only receives the final weights); else
    None, esopt.models.load's default device (the GPU of the rank, which HF generate runs on)."""
    return "cpu" if settings["name"] == "vllm" else None


def open_engine(settings: dict[str, Any], model: torch.nn.Module, tokenizer, model_dir, seed: int = 0,
                slots: int = 1, rank: int | None = None):
    """The rollout policy for engine settings (esopt.config.engine_settings): the HF model
    itself, a PopulationEngine over the model with `slots` member slots (an ES run's members
    per rank; `rank`: the low-rank ES variant's), or a VLLMEngine over model_dir. Returns (policy, record) where record names the
    engine and its version for the provenance."""
    if settings["name"] in ("hf", "population"):
        import transformers

        record = {"name": "hf", "version": transformers.__version__}
        if settings["name"] == "hf":
            return model, record
        from esopt.agent.population import PopulationEngine

        return (PopulationEngine(model, tokenizer, slots=slots, context=settings["context"], rank=rank),
                {**record, "name": "population", "context": settings["context"]})
    if settings["name"] != "vllm":
        raise ValueError(f"unknown engine {settings['name']!r} (expected hf, population or vllm)")
    from esopt.agent.vllm_engine import VLLMEngine  # the optional extra: imported only when named

    opts = {k: v for k, v in settings.items() if k != "name"}
    engine = VLLMEngine(model_dir, tokenizer, dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
                        seed=seed, **opts)
    return engine, {"name": "vllm", "version": engine.version, **opts, "prefix_caching": engine.prefix_caching}
