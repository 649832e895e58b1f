#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside envs/vllm.yaml's environment right after creating it.
# causal-conv1d is the causal convolution of Qwen3.5's Gated DeltaNet layers that transformers
# uses when it is installed (beside flash-linear-attention, from esopt[gpu]). PyPI has only its
# source, which builds against the environment's CUDA torch, so it cannot be a plain pip
# requirement of the environment file (pip would build it in isolation, without torch).
# Without it HF runs its reference PyTorch loop: slower and hungrier, the same model.
set -u
if python -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)"; then
  pip install --no-build-isolation "causal-conv1d>=1.7,<2" \
    || echo "esopt: causal-conv1d did not build (it needs nvcc, or a prebuilt wheel for this torch); HF runs Qwen3.5's reference convolution" >&2
else
  echo "esopt: no CUDA torch in this environment; causal-conv1d skipped" >&2
fi
