"""Agentic ESOpt: evolution strategies for long-horizon LLM agents.

Layers (imports point downward only): es -> envs -> agent -> models -> runs/report -> cli.
"""

__version__ = "0.1.0"
