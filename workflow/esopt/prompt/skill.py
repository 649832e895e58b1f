"""The skill document, analyst edits, and the rule-based hierarchical merge of Trace2Skill.

A skill document is markdown that goes into the agent's system prompt:

    # Skills

    ## Checking
    - Verify the row, column and box before placing a digit.

    ## Format
    - Reply with exactly one move per turn.

Items are numbered 1..N in render order (section by section); analysts refer to
them as ``#n``. An analyst reply holds one edit per line:

    ADD [section]: text
    REVISE #3: new text
    REMOVE #5

Everything here treats model output as untrusted: `parse_edits` never raises, and
an edit that does not fit the document is skipped, never applied halfway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

Op = Literal["add", "remove", "revise"]
OPS: tuple[str, ...] = ("add", "remove", "revise")
DEFAULT_SECTION = "General"
TITLE = "Skills"
MAX_SECTION_CHARS = 40


# --------------------------------------------------------------------------- text helpers

def normalize(text: str) -> str:
    """The dedup key of a text: lower case, punctuation dropped, whitespace collapsed.
    "Check the row first." and "check the row first" are the same lesson."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def clean_text(text: str) -> str:
    """One line: whitespace collapsed, surrounding quotes/backticks and a bullet dropped."""
    text = " ".join(str(text).split())
    text = re.sub(r"^[-*•+]\s+", "", text)
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def clean_section(name: str) -> str:
    """A section name fit for a `## ` heading: no markdown/brackets, short; "" -> General."""
    name = re.sub(r"[\[\]#*`<>]", " ", str(name))
    name = " ".join(name.split()).strip(" :-–.")
    return name[:MAX_SECTION_CHARS].strip() or DEFAULT_SECTION


# --------------------------------------------------------------------------- edits

@dataclass(frozen=True)
class Edit:
    """One change to a skill document. `target` is the number (1-based, as the
    analyst saw it) of an existing item for remove/revise; None for add. `section`
    matters for add only; `text` is empty for remove."""
    op: Op
    section: str = ""
    text: str = ""
    target: int | None = None

    def render(self) -> str:
        if self.op == "add":
            return f"ADD [{self.section}]: {self.text}"
        if self.op == "revise":
            return f"REVISE #{self.target}: {self.text}"
        return f"REMOVE #{self.target}"


@dataclass(frozen=True)
class Proposal:
    """An edit and its support: how many traces proposed it (after merging)."""
    edit: Edit
    support: int = 1


_OP_WORDS = {"add": "add", "revise": "revise", "update": "revise", "edit": "revise", "modify": "revise",
             "remove": "remove", "delete": "remove", "drop": "remove"}
_LEAD = re.compile(r"^\s*(?:[-*•+]\s*|\d{1,3}[.)]\s+|#{1,6}\s+|>\s*)?")
_OP = re.compile(r"^(add|revise|update|edit|modify|remove|delete|drop)\b", re.IGNORECASE)
_ADD_BRACKET = re.compile(r"^\s*(?:to\s+)?\[([^\]]*)\]\s*[:\-–]?\s*(.*)$", re.IGNORECASE)
_ADD_COLON = re.compile(r"^\s*:\s*(.*)$")
_ADD_NAMED = re.compile(r"^\s+(?:to\s+)?([A-Za-z][\w&/\-]*(?:\s[\w&/\-]+){0,3})\s*:\s*(.+)$")
_TARGET = re.compile(r"^\s*(?:item\s*)?\[?\s*#?\s*(\d{1,6})\s*\]?\s*[:\-–.)]?\s*(.*)$", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^<[^<>]*>$|^\.\.\.$|^(text|new text|lesson)$", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)


def parse_edits(reply: object, n_items: int | None = None, max_chars: int = 200) -> tuple[list[Edit], int]:
    """(edits, n_malformed) from an analyst reply, one edit per line.

    Tolerant: ops are case-insensitive (DELETE/UPDATE are read as REMOVE/REVISE),
    a leading "- ", "* ", "1. " or markdown bold is ignored, `ADD: text` goes to the
    General section, `REVISE 3 text` needs no "#" or colon. Lines that do not start
    with an op word are ignored (prose, NONE). A line that starts like an edit but
    cannot be used counts as malformed: no text, a text over `max_chars`, a copied
    placeholder like "<lesson>", a missing target, or a target outside 1..n_items
    (no upper bound when n_items is None). Never raises."""
    try:
        text = "" if reply is None else str(reply)
    except Exception:  # noqa: BLE001 - a reply whose __str__ fails is just a bad reply
        return [], 0
    text = _THINK.sub("\n", text)
    if "</think>" in text.lower():  # reasoning whose opening tag the server dropped
        text = text[text.lower().rfind("</think>") + len("</think>"):]
    edits: list[Edit] = []
    malformed = 0
    for raw in text.splitlines():
        line = raw.replace("**", "").replace("__", "").strip().strip("`").strip()
        line = _LEAD.sub("", line, count=1)
        m = _OP.match(line)
        if m is None:
            continue
        edit = _parse_one(_OP_WORDS[m.group(1).lower()], line[m.end():], n_items, max_chars)
        if edit is None:
            malformed += 1
        else:
            edits.append(edit)
    return edits, malformed


def _valid_text(text: str, max_chars: int) -> str | None:
    text = clean_text(text)
    if not text or len(text) > max_chars or _PLACEHOLDER.match(text) or not re.search(r"[0-9A-Za-z]", text):
        return None
    return text


def _parse_one(op: str, rest: str, n_items: int | None, max_chars: int) -> Edit | None:
    if op == "add":
        m = _ADD_BRACKET.match(rest) or _ADD_COLON.match(rest) or _ADD_NAMED.match(rest)
        if m is None:
            return None
        section, body = (m.group(1), m.group(2)) if m.re.groups == 2 else (DEFAULT_SECTION, m.group(1))
        if _PLACEHOLDER.match(section.strip()):
            section = DEFAULT_SECTION
        body = _valid_text(body, max_chars)
        return None if body is None else Edit("add", clean_section(section), body, None)
    m = _TARGET.match(rest)
    if m is None:
        return None
    target = int(m.group(1))
    if target < 1 or (n_items is not None and target > n_items):
        return None
    if op == "remove":
        return Edit("remove", "", "", target)  # anything after the number is a reason
    body = _valid_text(m.group(2), max_chars)
    return None if body is None else Edit("revise", "", body, target)


# --------------------------------------------------------------------------- merge

def _key(edit: Edit) -> tuple:
    """Two edits with the same key are the same proposal. Adds are compared by
    normalized text only (the same lesson filed under two sections is one lesson)."""
    if edit.op == "add":
        return ("add", normalize(edit.text))
    if edit.op == "remove":
        return ("remove", edit.target)
    return ("revise", edit.target, normalize(edit.text))


def _pool(proposals: Iterable[Proposal], count_duplicates: bool) -> list[Proposal]:
    """Deduplicate by key in first-seen order; support adds up (or stays, for the
    repeats inside one trace's reply: one trace is one vote)."""
    seen: dict[tuple, list] = {}
    for p in proposals:
        k = _key(p.edit)
        if k in seen:
            if count_duplicates:
                seen[k][1] += p.support
        else:
            seen[k] = [p.edit, p.support]
    return [Proposal(e, s) for e, s in seen.values()]


def _resolve(pooled: list[Proposal]) -> list[Proposal]:
    """Cancel contradictions and order by support.

    Proposals on the same target that differ (REMOVE #3 vs REVISE #3, or two
    different revisions of #3) cannot all be applied: the one with strictly the
    most support stays, a tie keeps none of them. Then stable sort by support,
    most first (ties keep first-seen order, so the result is deterministic)."""
    by_target: dict[int, list[int]] = {}
    for i, p in enumerate(pooled):
        if p.edit.op != "add":
            by_target.setdefault(p.edit.target, []).append(i)
    drop: set[int] = set()
    for idx in by_target.values():
        if len(idx) < 2:
            continue
        best = max(pooled[i].support for i in idx)
        winners = [i for i in idx if pooled[i].support == best]
        drop.update(i for i in idx if len(winners) > 1 or i != winners[0])
    kept = [p for i, p in enumerate(pooled) if i not in drop]
    return sorted(kept, key=lambda p: -p.support)


def merge_pair(a: Sequence[Proposal], b: Sequence[Proposal]) -> list[Proposal]:
    """One merge node: the union of two proposal lists, near-identical proposals
    joined (support summed), contradictions cancelled, ordered by support."""
    return _resolve(_pool([*a, *b], count_duplicates=True))


def leaf(edits: Sequence[Edit]) -> list[Proposal]:
    """One trace's edits as proposals of support 1 (repeats inside the reply count once)."""
    return _resolve(_pool((Proposal(e, 1) for e in edits), count_duplicates=False))


def merge_hierarchical(per_trace: Sequence[Sequence[Edit]], max_edits: int | None = None) -> list[Proposal]:
    """Merge per-trace edit lists as a binary tree: neighbours are merged pairwise,
    level by level ([L1..L5] -> [m12, m34, L5] -> [m1234, L5] -> [m12345]), until one
    list remains; that list, capped at `max_edits`, is the result.

    A contradiction settled at a lower node is final: if REMOVE #3 and REVISE #3 tie
    in one subtree both are gone, and the other subtree's votes for either start anew."""
    level = [leaf(edits) for edits in per_trace]
    if not level:
        return []
    while len(level) > 1:
        nxt = [merge_pair(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    out = level[0]
    return out if max_edits is None else out[:max_edits]


# --------------------------------------------------------------------------- document

@dataclass
class SkillItem:
    section: str
    text: str
    support: int = 1  # traces that proposed or reinforced it, over all generations
    serial: int = 0   # creation order: lower is older


@dataclass
class ApplyResult:
    applied: int = 0      # edits that changed the document (add, remove, revise)
    reinforced: int = 0   # adds/revisions equal to an item already there: its support grows
    skipped: int = 0      # target out of range or already edited by a better-supported edit
    evicted: int = 0      # items dropped to keep max_items

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class SkillDocument:
    """Ordered items grouped by section; rendering is a pure function of the items.

    `items` is always kept grouped by section (sections in order of first
    appearance), so item #n is items[n-1] both in the numbered render the analysts
    see and in edits that refer to it."""
    items: list[SkillItem] = field(default_factory=list)
    max_items: int = 12
    max_item_chars: int = 200
    next_serial: int = 0

    def __post_init__(self) -> None:
        if self.max_items < 1 or self.max_item_chars < 8:
            raise ValueError(f"max_items must be >= 1 and max_item_chars >= 8 (got {self.max_items}, {self.max_item_chars})")
        self.items = _grouped(self.items)
        if self.items:
            self.next_serial = max(self.next_serial, max(it.serial for it in self.items) + 1)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def sections(self) -> list[str]:
        out: list[str] = []
        for it in self.items:
            if it.section not in out:
                out.append(it.section)
        return out

    # ---- text
    @classmethod
    def parse(cls, text: str, max_items: int = 12, max_item_chars: int = 200) -> SkillDocument:
        """Read a rendered document back (numbered or not). Tolerant: lines that are
        neither a `## ` heading nor a `- ` bullet are ignored; a bullet before any
        heading goes to General; over-long items are cut to max_item_chars; items past
        max_items are dropped. Support starts at 1, age follows document order."""
        doc = cls(max_items=max_items, max_item_chars=max_item_chars)
        section = DEFAULT_SECTION
        for line in str(text).splitlines():
            s = line.strip()
            if s.startswith("## "):
                section = clean_section(s[3:])
            elif s.startswith(("- ", "* ")):
                body = re.sub(r"^\[#\d+\]\s*", "", s[2:].strip())
                body = clean_text(body)[:max_item_chars].strip()
                if body and len(doc.items) < max_items:
                    doc._insert(SkillItem(doc._section_name(section), body, 1, doc._serial()))
        return doc

    def render(self, numbered: bool = False) -> str:
        """Stable markdown: `# Skills`, then `## section` blocks of `- item` bullets.
        numbered=True prefixes each bullet with [#n] (what the analysts see)."""
        lines = [f"# {TITLE}"]
        current = None
        for n, it in enumerate(self.items, 1):
            if it.section != current:
                lines += ["", f"## {it.section}"]
                current = it.section
            lines.append(f"- [#{n}] {it.text}" if numbered else f"- {it.text}")
        return "\n".join(lines) + "\n"

    def numbered(self) -> list[tuple[int, SkillItem]]:
        return list(enumerate(self.items, 1))

    # ---- edits
    def apply(self, proposals: Sequence[Proposal | Edit]) -> ApplyResult:
        """Apply merged proposals (best supported first) in place.

        Targets refer to the numbering of the document as it was before this call:
        removals are only marked while applying and revisions change text in place,
        so no number shifts mid-application. At most one edit per target is used
        (the first, i.e. best supported). An add whose text equals an existing item
        (normalized) reinforces that item instead of duplicating it; so does a
        revision to the item's current text. New items go to the end of their
        section (a new section goes last). Then max_items is enforced by evicting
        the least-supported items, oldest first among equals."""
        res = ApplyResult()
        snapshot = list(self.items)
        removed: set[int] = set()  # ids of the items marked for removal
        touched: set[int] = set()
        for p in proposals:
            p = p if isinstance(p, Proposal) else Proposal(p, 1)
            e = p.edit
            if e.op in ("remove", "revise"):
                t = e.target
                if t is None or not 1 <= t <= len(snapshot) or t in touched:
                    res.skipped += 1
                    continue
                touched.add(t)
                item = snapshot[t - 1]
                if e.op == "remove":
                    removed.add(id(item))
                    res.applied += 1
                    continue
                text = clean_text(e.text)[: self.max_item_chars].strip()
                if not text:
                    res.skipped += 1
                elif normalize(text) == normalize(item.text):
                    item.support += p.support
                    res.reinforced += 1
                else:
                    item.text = text
                    item.support = max(item.support, p.support)
                    res.applied += 1
            elif e.op == "add":
                text = clean_text(e.text)[: self.max_item_chars].strip()
                if not text:
                    res.skipped += 1
                    continue
                same = [i for i, it in enumerate(self.items)
                        if id(it) not in removed and normalize(it.text) == normalize(text)]
                if same:
                    self.items[same[0]].support += p.support
                    res.reinforced += 1
                    continue
                self._insert(SkillItem(self._section_name(clean_section(e.section)), text, p.support, self._serial()))
                res.applied += 1
            else:
                res.skipped += 1
        self.items = [it for it in self.items if id(it) not in removed]
        self._dedupe()
        res.evicted = self._enforce_cap()
        return res

    # ---- state
    def state_dict(self) -> dict:
        return {"text": self.render(), "items": [asdict(it) for it in self.items], "max_items": self.max_items,
                "max_item_chars": self.max_item_chars, "next_serial": self.next_serial}

    @classmethod
    def from_state_dict(cls, d: dict) -> SkillDocument:
        items = [SkillItem(str(it["section"]), str(it["text"]), int(it["support"]), int(it["serial"])) for it in d["items"]]
        return cls(items, int(d["max_items"]), int(d["max_item_chars"]), int(d["next_serial"]))

    # ---- internals
    def _serial(self) -> int:
        self.next_serial += 1
        return self.next_serial - 1

    def _section_name(self, name: str) -> str:
        """An existing section's spelling when the name matches it case-insensitively."""
        for s in self.sections:
            if s.lower() == name.lower():
                return s
        return name

    def _insert(self, item: SkillItem) -> None:
        last = max((i for i, it in enumerate(self.items) if it.section == item.section), default=None)
        if last is None:
            self.items.append(item)
        else:
            self.items.insert(last + 1, item)

    def _dedupe(self) -> None:
        """A revision may have produced a copy of another item: keep the first, sum support."""
        keep: dict[str, SkillItem] = {}
        out = []
        for it in self.items:
            k = normalize(it.text)
            if k in keep:
                keep[k].support += it.support
            else:
                keep[k] = it
                out.append(it)
        self.items = out

    def _enforce_cap(self) -> int:
        excess = len(self.items) - self.max_items
        if excess <= 0:
            return 0
        victims = {id(it) for it in sorted(self.items, key=lambda it: (it.support, it.serial))[:excess]}
        self.items = [it for it in self.items if id(it) not in victims]
        return excess


def _grouped(items: Sequence[SkillItem]) -> list[SkillItem]:
    order: list[str] = []
    for it in items:
        if it.section not in order:
            order.append(it.section)
    return [it for s in order for it in items if it.section == s]
