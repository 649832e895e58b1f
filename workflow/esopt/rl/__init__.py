"""Agentic GRPO and Agentic PPO baselines on the same environments and rollouts as ES."""
