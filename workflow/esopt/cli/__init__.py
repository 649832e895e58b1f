"""Thin command-line entry points; each Snakemake rule calls one of them."""

import os

# Idle threads that spin instead of sleeping (libgomp's default wait policy, the HF
# tokenizers' thread pool) take the core another job needs: with other jobs on every core
# a warm-start step ran 10-20x slower (benchmarks/cpu_waiting.py). Neither setting changes
# a number, only how idle threads wait; set before torch and tokenizers load.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
