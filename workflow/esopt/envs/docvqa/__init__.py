"""DocVQA: questions about a document image, answered from what an OCR tool reads.

The agent never sees the image or its ground-truth text: it calls the OCR tool
(esopt.agent.tools.ocr, added by the ReAct wrapper esopt.agent.react) and must answer
from the text that comes back. The score of an answer is ANLS, the DocVQA metric
(`anls`): 1 for an exact match up to case and spacing, partial credit for near
misses, 0 past a normalized edit distance of 0.5.

Two sources of tasks:
- `render_documents`: synthetic forms, receipts and small tables drawn here with PIL
  (600x400 grayscale PNGs, DejaVu Sans 24 px when the system or matplotlib has it,
  else Pillow's built-in scalable font). Every answer is a string printed in the
  image, found by its label ("Invoice No:", "TOTAL", a row and a column), so that OCR
  can read it (tests/test_ocr.py checks a few; OCR times and read rates:
  docs/tool_agents.md, OCR).
  Train/test split by hash: a document is 'test' iff the first 8 hex digits of the
  sha256 of its content are divisible by 5 (`split_of`); the generator drops
  documents of the other split, so the splits are disjoint by construction.
- `load_docvqa`: the real Single-Page DocVQA, from the official annotation JSON,
  a parquet file/folder of `lmms-lab/DocVQA`, or the hub (network or a warm cache;
  esopt.envs.hub_data, whose HubUnavailableError is re-exported here, otherwise).

Modules:
  tasks     DocTask
  metric    ANLS: normalize, levenshtein, anls
  generate  the content of forms, receipts and tables (items, questions), split_of
  render    drawing them as PNGs with PIL: render_documents, render_image, fonts
  load      the real DocVQA from JSON, parquet or the hub: load_docvqa
  env       DocVQAEnv, instructions, NO_ANSWER_FEEDBACK
  benchmark BENCHMARK: its registration (esopt.envs.benchmarks): task sets, OCR read once, expert
"""

from esopt.envs.docvqa.benchmark import BENCHMARK
from esopt.envs.docvqa.env import NO_ANSWER_FEEDBACK, DocVQAEnv, instructions
from esopt.envs.docvqa.generate import FORM_TITLES, split_of
from esopt.envs.docvqa.load import load_docvqa
from esopt.envs.docvqa.metric import anls, levenshtein
from esopt.envs.docvqa.render import render_documents
from esopt.envs.docvqa.tasks import DocTask
from esopt.envs.hub_data import HubUnavailableError

__all__ = [
    "BENCHMARK",
    "FORM_TITLES",
    "NO_ANSWER_FEEDBACK",
    "DocTask",
    "DocVQAEnv",
    "HubUnavailableError",
    "anls",
    "instructions",
    "levenshtein",
    "load_docvqa",
    "render_documents",
    "split_of",
]
