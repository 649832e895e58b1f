"""Which files of the checkout that audits differ from the tree a record was made from.

A record's `git` (esopt.provenance.record.git_state) holds the commit and every file the
tree had changed from it, with the git blob hash of its content (null: deleted). A file
differs between that tree and the checkout now when its content then (the recorded hash,
else the file at the recorded commit) is not its content now (the working file, hashed as
git does). The candidates are the files the record lists and the files the checkout has
changed since the recorded commit (`git diff`, untracked files), so the comparison costs
a few git calls per distinct tree, whatever the size of the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TreeDifference:
    files: list[str]  # paths from the repository root whose content differs, sorted
    unknown: str | None = None  # why the comparison is incomplete (None: it is exact)


class Checkout:
    """The git checkout a directory lies in (default: the one the audit's code runs from)."""

    def __init__(self, where: str | os.PathLike | None = None):
        self.where = Path(where) if where is not None else Path(__file__).resolve().parent
        self.top: Path | None = None
        self.head: str | None = None
        try:
            self.top = Path(self._git("rev-parse", "--show-toplevel", cwd=self.where).strip())
            self.head = self._git("rev-parse", "HEAD").strip()
        except (OSError, subprocess.CalledProcessError):
            self.top = self.head = None
        self._trees: dict[str, dict[str, str] | None] = {}
        self._since: dict[str, set[str]] = {}
        self._now: dict[str, str | None] = {}
        self._done: dict[str, TreeDifference] = {}

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(["git", *args], cwd=cwd or self.top, capture_output=True, text=True, check=True).stdout

    def tree(self, commit: str) -> dict[str, str] | None:
        """{path: blob} of a commit; None when this repository does not have it."""
        if commit not in self._trees:
            try:
                out = self._git("ls-tree", "-r", "-z", "--full-tree", commit)
            except subprocess.CalledProcessError:
                self._trees[commit] = None
            else:
                files = {}
                for entry in filter(None, out.split("\0")):
                    meta, path = entry.split("\t", 1)
                    files[path] = meta.split()[2]
                self._trees[commit] = files
        return self._trees[commit]

    def changed_since(self, commit: str) -> set[str]:
        """Files whose content in the working tree may differ from the commit's."""
        if commit not in self._since:
            diff = self._git("diff", "--name-only", "--no-renames", "-z", commit, "--")
            untracked = self._git("ls-files", "--others", "--exclude-standard", "-z")
            self._since[commit] = set(filter(None, diff.split("\0"))) | set(filter(None, untracked.split("\0")))
        return self._since[commit]

    def now(self, paths: list[str]) -> dict[str, str | None]:
        """Blob hash of each file's content in the working tree (None: no such file)."""
        todo = [p for p in paths if p not in self._now]
        present = [p for p in todo if (self.top / p).is_file()]
        for p in todo:
            self._now[p] = None
        if present:
            hashes = subprocess.run(["git", "hash-object", "--stdin-paths"], cwd=self.top, capture_output=True,
                                    input="\n".join(present) + "\n", text=True, check=True).stdout.split()
            self._now.update(zip(present, hashes))
        return {p: self._now[p] for p in paths}

    def differences(self, git: dict[str, Any]) -> TreeDifference:
        """The files in which the tree a record's `git` describes and this checkout differ."""
        key = json.dumps(git, sort_keys=True)
        if key in self._done:
            return self._done[key]
        commit = git.get("commit")
        changes = git.get("changes")
        unknown = None
        if self.top is None:
            res = TreeDifference([], "no git checkout here to compare with")
        elif not commit or self.tree(commit) is None:
            res = TreeDifference([], f"this checkout does not have commit {str(commit)[:12]}: cannot tell which files differ")
        else:
            if not isinstance(changes, dict):
                changes = {}
                if git.get("dirty"):
                    unknown = "a dirty tree whose changed files the record does not list (an older record)"
            elif git.get("changes_not_listed"):
                unknown = f"{git['changes_not_listed']} more changed files that the record does not list"
            then_tree = self.tree(commit)
            candidates = sorted(self.changed_since(commit) | set(changes))
            now = self.now(candidates)
            then = {p: changes[p] if p in changes else then_tree.get(p) for p in candidates}
            res = TreeDifference([p for p in candidates if then[p] != now[p]], unknown)
        self._done[key] = res
        return res
