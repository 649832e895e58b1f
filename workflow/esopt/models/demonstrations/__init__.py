"""Demonstration sources for the tiny models' warm start (esopt.models.sft), one per benchmark:
sudoku (expert moves with injected mistakes) and tools (expert ReAct episodes with the
real sandbox and OCR). The heuristic writer's are part of the feature: esopt.ahd.writer."""
