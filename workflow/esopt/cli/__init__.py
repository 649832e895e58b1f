"""Thin command-line entry points; each Snakemake rule calls one of them."""
