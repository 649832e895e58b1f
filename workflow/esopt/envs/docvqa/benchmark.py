"""DocVQA as a registered benchmark (esopt.envs.benchmarks): its task sets, the OCR reading
made once per set, its instructions and the expert whose episodes warm-start the tiny
tool model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from esopt.envs.benchmarks import Benchmark, Config
from esopt.envs.docvqa.env import DocVQAEnv, instructions
from esopt.envs.docvqa.load import load_docvqa
from esopt.envs.docvqa.render import render_documents
from esopt.envs.docvqa.tasks import DocTask


def load_set(name: str, spec: Mapping[str, Any], out: Path, cfg: Config) -> list[DocTask]:
    """source generated (documents rendered under out/images) or docvqa (the real one)."""
    src, n, seed = spec["source"], spec.get("n"), spec.get("seed", 0)
    split = "train" if name == "train" else "test"
    if src == "generated":
        return render_documents(out / "images", n, seed=seed, split=split)
    if src == "docvqa":
        return load_docvqa(spec.get("path") or spec.get("hub_id"), split=spec.get("split", "validation"), limit=n,
                           image_dir=out / "images")
    raise ValueError(f"docvqa set {name!r}: source {src!r} is not one this benchmark knows (generated, docvqa)")


def read_every_image(tasks: Sequence[DocTask], tools: Sequence[Any]) -> None:
    """OCR reads each image of the set once, into the data directory's cache (OCR is
    deterministic: the jobs then read the cache, see esopt.runs.tool_episodes.make_tools)."""
    ocr = next(t for t in tools if t.name == "ocr")
    for image in tqdm(sorted({t.image for t in tasks}), desc="OCR"):
        ocr.read(image)


def expert_actions(task: DocTask, tools: Sequence[Any]) -> list[str]:
    """OCR for the label printed before the answer on its line ("Invoice No" for
    "Invoice No: INV-4821"), which returns that line alone; the whole text when the
    answer starts its line."""
    ocr = next(t for t in tools if t.name == "ocr")
    for line in ocr("", task).splitlines():
        for a in task.answers:
            i = line.lower().find(a.lower()) if a else -1
            label = line[:i].strip().rstrip(":").strip() if i > 0 else ""
            if label:
                return [f"<ocr>{label}</ocr>"]
    return ["<ocr></ocr>"]


def expert_answer(task: DocTask, observation: str) -> str | None:
    """An answer as OCR spelled it in the tool output, or None when OCR did not read one."""
    text = observation.lower()
    for a in task.answers:
        i = text.find(a.lower())
        if a and i >= 0:
            return observation[i:i + len(a)]
    return None


BENCHMARK = Benchmark(
    name="docvqa", block="tool_agents.benchmarks.docvqa", task_class=DocTask, env_class=DocVQAEnv,
    instructions=lambda cfg: instructions(), load_set=load_set, data_seed=lambda cfg, spec: spec.get("seed", 0),
    metric="ANLS of the answer against the gold answers (success: ANLS >= 0.5)",
    prepare=read_every_image, expert_actions=expert_actions, expert_answer=expert_answer)
