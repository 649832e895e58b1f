"""The policy side: chat formatting and batched multi-turn rollouts."""
