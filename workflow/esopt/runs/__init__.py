"""What one pipeline job runs: a benchmark's episodes for a model state and their summary,
the training runs (ES, GRPO, PPO on Sudoku; the tool and web agents' methods), evaluation
during training, the base checks and the peak-memory measurement."""
