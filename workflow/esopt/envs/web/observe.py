"""What the agent sees of a page: the accessibility tree with element ids, or simplified HTML.

"axtree" (default): Playwright's accessibility snapshot (`aria_snapshot(mode="ai")`, the
browser's own roles and accessible names) rewritten in WebArena's line format, one node
per line, a tab per level:

    [12] link 'Kitchen'
    [15] textbox 'Search products'
    [21] cell '$12.99'
    StaticText 'Some text'

Ids are numbered 1, 2, ... per observation; each maps to the snapshot's ref of the node,
and actions find the element again through Playwright's `aria-ref=<ref>` selector, valid
until the next snapshot, which is taken at every observation. Unnamed containers (generic,
list, listitem, paragraph without text, ...) are left out, their children moving up a
level, and link targets (/url) are dropped, as in WebArena's tree.

"html": the WebRL authors' simplified HTML: visible elements only, interactive ones
(links, buttons, inputs, selects, textareas) numbered in document order with id="N"
(kept on the element as data-esopt-id="N" for the actions), a few attributes (type,
name, placeholder, value, title, aria-label), containers without attributes unwrapped.

Both are cut to `max_chars` with a marker that says how much was left out.
"""

from __future__ import annotations

import json
import re

MODES = ("axtree", "html")
ID_ATTR = "data-esopt-id"

_LINE_RE = re.compile(r"^(\s*)- (.*)$")
_QUOTED_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ATTR_RE = re.compile(r"\[([a-z-]+)(?:=([^\]]*))?\]")
_DROP_ATTRS = {"cursor", "active", "ref"}


def truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars)
    cut = cut if cut > max_chars // 2 else max_chars
    return text[:cut] + f"\n[... observation truncated: {len(text) - cut} more characters ...]"


def _json_str(s: str) -> str:
    try:
        return json.loads(f'"{s}"')
    except ValueError:
        return s


def _unquote_key(content: str) -> str:
    """YAML may single-quote a whole key: - 'link "a: b" [ref=e3]': text"""
    if content.startswith("'"):
        i = 1
        while i < len(content):
            if content[i] == "'":
                if content[i + 1:i + 2] == "'":
                    i += 2
                    continue
                return content[1:i].replace("''", "'") + content[i + 1:]
            i += 1
    return content


def _value_text(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return _json_str(raw[1:-1])
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    return raw


def _q(text: str) -> str:
    return "'" + text.replace("\n", " ") + "'"


# roles that only group others: shown only when they carry a name or text of their own
UNWRAP_ROLES = {"generic", "list", "listitem", "rowgroup", "group", "none", "presentation", "banner", "main",
                "contentinfo", "complementary", "article", "search", "form", "region", "paragraph", "LabelText"}


def format_aria(snapshot: str) -> tuple[str, dict[str, str]]:
    """A Playwright ai-mode aria snapshot as WebArena-style lines, and {shown id: snapshot ref}.

    Ids are numbered 1, 2, ... in the order the nodes appear, so they stay small whatever
    the snapshot's own refs look like (they grow with every navigation of a page)."""
    out: list[str] = []
    refs: dict[str, str] = {}
    stack: list[tuple[int, int]] = []  # (indent of an open node, its output depth)
    for line in snapshot.splitlines():
        m = _LINE_RE.match(line)
        if m is None:
            continue
        indent, content = len(m.group(1)), _unquote_key(m.group(2))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        depth = stack[-1][1] + 1 if stack else 0
        if content.startswith("/"):  # /url:, /placeholder: properties
            continue
        # split "head: text" at the first colon outside quotes and brackets
        head, text, quote, bracket = content, "", False, 0
        for i, ch in enumerate(content):
            if ch == '"' and (i == 0 or content[i - 1] != "\\"):
                quote = not quote
            elif not quote and ch == "[":
                bracket += 1
            elif not quote and ch == "]":
                bracket -= 1
            elif not quote and bracket == 0 and ch == ":":
                head, text = content[:i], _value_text(content[i + 1:])
                break
        head = head.strip()
        role = head.split(" ", 1)[0]
        nm = _QUOTED_RE.search(head)
        name = _json_str(nm.group(1)) if nm else ""
        attrs = {k: v for k, v in _ATTR_RE.findall(head[nm.end():] if nm else head)}
        if role == "text" or (role == "generic" and not name and text):
            if text:
                out.append("\t" * depth + f"StaticText {_q(text)}")
            continue
        if role in UNWRAP_ROLES and not name and not text:
            stack.append((indent, depth - 1))  # children take this node's place
            continue
        el = ""
        if attrs.get("ref"):
            el_id = str(len(refs) + 1)
            refs[el_id] = attrs["ref"]
            el = f"[{el_id}] "
        shown = " ".join(k if v == "" else f"{k}={v}" for k, v in attrs.items() if k not in _DROP_ATTRS)
        parts = [el + role] + ([_q(name)] if name else []) + ([shown] if shown else [])
        out.append("\t" * depth + " ".join(parts) + (f": {text}" if text else ""))
        stack.append((indent, depth))
    return "\n".join(out), refs


def aria_selector(ref: str) -> str:
    return f"aria-ref={ref}"


HTML_JS = r"""
() => {
  const KEEP = ["type", "name", "placeholder", "value", "title", "aria-label", "alt"];
  const INTERACTIVE = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY"]);
  const ROLES = new Set(["button", "link", "checkbox", "radio", "tab", "menuitem", "option", "switch"]);
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "SVG"]);
  const UNWRAP = new Set(["div", "span", "section", "b", "strong", "em", "i", "small", "header", "footer", "main", "body", "html"]);
  const esc = s => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const attr = s => esc(String(s)).replace(/"/g, "&quot;");
  document.querySelectorAll("[data-esopt-id]").forEach(e => e.removeAttribute("data-esopt-id"));
  let next = 0;
  const visible = el => el.checkVisibility ? el.checkVisibility() : !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  function walk(node) {
    if (node.nodeType === 3) { const t = node.textContent.replace(/\s+/g, " ").trim(); return t ? esc(t) : ""; }
    if (node.nodeType !== 1 || SKIP.has(node.tagName.toUpperCase())) return "";
    const tag = node.tagName.toLowerCase();
    if (tag !== "option" && !visible(node)) return "";
    const parts = [];
    for (const c of node.childNodes) { const s = walk(c); if (s) parts.push(s); }
    const inner = parts.join(" ");
    const interactive = INTERACTIVE.has(node.tagName) || node.hasAttribute("onclick") || ROLES.has(node.getAttribute("role"));
    let attrs = "";
    if (interactive) { const id = String(next++); node.setAttribute("data-esopt-id", id); attrs += ` id="${id}"`; }
    for (const a of KEEP) {
      const v = (a === "value" && (tag === "input" || tag === "textarea" || tag === "select")) ? node.value : node.getAttribute(a);
      if (v && !(a === "type" && tag !== "input")) attrs += ` ${a}="${attr(v)}"`;
    }
    if (tag === "option" && node.selected) attrs += " selected";
    if (node.checked) attrs += " checked";
    if (!attrs && !inner) return "";
    if (!attrs && UNWRAP.has(tag)) return inner;
    return `<${tag}${attrs}>${inner ? " " + inner + " " : ""}</${tag}>`;
  }
  return walk(document.body || document.documentElement);
}
"""


def html_locator_selector(element_id: str) -> str:
    return f'[{ID_ATTR}="{element_id}"]'
