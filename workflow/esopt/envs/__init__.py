"""Benchmark environments behind one multi-turn text interface and one episode result.

Interface (esopt.agent.rollout.TextEnv): `reset(task) -> observation`, then
`step(action text) -> (observation, reward, done, info)` until done. Model output is
untrusted: a malformed action gets feedback in the observation, never an exception.

Episode result: when an episode ends in the environment, the info of its last step
holds `success` (bool: the task is solved, or answered well enough: math exactly,
DocVQA at ANLS >= 0.5); an episode the rollout cuts at its turn or token budget is
unsuccessful (`info.get("success", False)`). Every info holds `invalid_actions`; the
reward is the score the methods optimize. Rollouts, ES fitness, the RL trainers,
Trace2Skill and the reports read only these. Each benchmark adds its own keys
(Sudoku: turns, placed, blanks_left; math: answer, gold; DocVQA: anls, answer).

Modules: sudoku (4x4/9x9 boards), math/ (ReAct with a Python sandbox), docvqa/ (ReAct
with OCR), web/ (WebArena-Lite in a browser), benchmarks (the agent benchmarks' registry),
hub_data (hub and local loaders). An agent benchmark is one package here that registers
itself (BENCHMARK, in its benchmark.py), plus one config block: docs/benchmarks.md.
"""
