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

"html": esopt's compact simplified HTML: visible elements only, interactive ones
(links, buttons, inputs, selects, textareas) numbered in document order with id="N"
(kept on the element as data-esopt-id="N" for the actions), a few attributes (type,
name, placeholder, value, title, aria-label), containers without attributes unwrapped.

"webrl": the simplified HTML VisualAgentBench's harness gives the WebRL agents
(`--observation_type webrl`; VAB-WebArena-Lite/new/html_tools/, written from its logic,
see `WEBRL_JS`): the part of the page inside the viewport, every element printed as
`<tag id="N" attr="..."> text children </tag>` with the harness's attributes (its
`data-bbox` box among them), ids 0, 1, ... on the innermost clickable elements shown,
kept on the element as data-label-id="N" (the harness's attribute) for the actions.

All are cut to `max_chars` with a marker that says how much was left out (None: never).
"""

from __future__ import annotations

import json
import re

MODES = ("axtree", "html", "webrl")
ID_ATTR = "data-esopt-id"
WEBRL_ID_ATTR = "data-label-id"  # the harness's (processors.py:1258)

_LINE_RE = re.compile(r"^(\s*)- (.*)$")
_QUOTED_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ATTR_RE = re.compile(r"\[([a-z-]+)(?:=([^\]]*))?\]")
_DROP_ATTRS = {"cursor", "active", "ref"}


def truncate(text: str, max_chars: int | None) -> str:
    if max_chars is None or len(text) <= max_chars:
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


# The harness's simplified HTML (VisualAgentBench @ 9055fc2, VAB-WebArena-Lite/new/html_tools/:
# fetch.py get_parsed_html, scripts/clickable_checker.js + label.js for the ids, scripts/prepare.js
# for the attributes, html_parser.py parse for what is printed, configs/html_prompt.py "xml" for
# the format), computed in the page in one pass instead of re-parsing outerHTML with lxml:
# - ids: elements that look clickable (an onclick, cursor: pointer, a clickable role, contenteditable,
#   a jsaction click, a clickable tag, a label of an enabled control, a "button" class, tabindex >= 0)
#   with at least 1 px^2 of their boxes on top at their centres inside the viewport; only the
#   innermost of nested ones; numbered 0, 1, ... in document order (data-label-id on the element);
# - attributes, in this order, empty ones and type="hidden" left out, a value already printed for
#   the element not repeated: title, value, type, placeholder, selected, data-value (an input's,
#   textarea's or select's current value), data-text (the element's own text nodes joined by ",";
#   a select's chosen option), data-testid, data-label, data-bbox (its first box, rounded:
#   "left,top,width,height" in viewport pixels), data-status (a checkbox's checked/not-checked,
#   a select's chosen option's "selected"); whitespace squeezed, values cut at 500 characters;
# - an element is shown when its box meets the viewport and it is not aria-hidden (an option of a
#   shown select always), has a label, own text or an attribute other than data-bbox, or more than
#   one child with text; others give way to their children; its text is what precedes its first
#   child element; scripts and styles are gone.
WEBRL_JS = r"""
() => {
  const ATTR = "data-label-id";
  document.querySelectorAll("[" + ATTR + "]").forEach(e => e.removeAttribute(ATTR));
  const de = document.documentElement;
  const vw = Math.max(de.clientWidth || 0, window.innerWidth || 0);
  const vh = Math.max(de.clientHeight || 0, window.innerHeight || 0);
  const W = window.innerWidth, H = window.innerHeight;
  const ROLES = ["button", "tab", "link", "checkbox", "menuitem", "menuitemcheckbox", "menuitemradio", "radio"];
  const TAGS = ["input", "textarea", "select", "button", "a", "iframe", "video", "object", "embed", "details"];
  const KEEP = ["title", "value", "type", "placeholder", "selected", "data-value", "data-text", "data-testid",
                "data-label", "data-bbox", "data-status"];
  const GONE = new Set(["script", "style"]);
  const squash = s => s.replace(/[^\S\u00a0]+/g, " ").trim().slice(0, 500);
  const tagOf = el => (el.tagName || "").toLowerCase();

  function jsactionClick(el) {
    for (const rule of el.getAttribute("jsaction").split(";")) {
      const parts = rule.trim().split(":");
      if (parts.length < 1 || parts.length > 2) continue;
      const ev = parts.length === 1 ? "click" : parts[0];
      const names = parts[parts.length - 1].trim().split(".");
      if (ev === "click" && names[0] !== "none" && (names[1] ?? "_") !== "_") return true;
    }
    return false;
  }
  function clickable(el, tag) {
    if (el.onclick != null || getComputedStyle(el).cursor === "pointer") return true;
    const map = tag === "img" ? (el.getAttribute("usemap") || "").replace(/^#/, "") : "";
    if (map && el.getClientRects().length && Array.from(document.getElementsByTagName("map")).some(m => m.name === map)) return true;
    const role = el.getAttribute("role");
    if (role != null && ROLES.includes(role.toLowerCase())) return true;
    const ce = el.getAttribute("contenteditable");
    if (ce != null && ["", "contenteditable", "true"].includes(ce.toLowerCase())) return true;
    if (el.hasAttribute("jsaction") && jsactionClick(el)) return true;
    if (TAGS.includes(tag)) return true;
    if (tag === "label" && el.control != null && !el.control.disabled) return true;
    if (tag === "img" && el.style && ["zoom-in", "zoom-out"].includes(el.style.cursor)) return true;
    const cls = el.getAttribute("class");
    if (cls && cls.toLowerCase().includes("button")) return true;
    const tv = el.getAttribute("tabindex");
    const ti = tv ? parseInt(tv) : -1;
    return !(ti < 0) && !isNaN(ti);
  }
  function shownArea(el) {  // its boxes that are on top at their centres, clipped to the viewport
    let area = 0;
    for (const bb of el.getClientRects()) {
      const hit = document.elementFromPoint(bb.left + bb.width / 2, bb.top + bb.height / 2);
      if (!hit || !(hit === el || el.contains(hit))) continue;
      area += (Math.min(vw, bb.right) - Math.max(0, bb.left)) * (Math.min(vh, bb.bottom) - Math.max(0, bb.top));
    }
    return area;
  }

  // 1. ids on the innermost clickable elements in view, in document order
  const cands = Array.from(document.querySelectorAll("*")).filter(el => clickable(el, tagOf(el)) && shownArea(el) >= 1);
  const outer = new Set();
  for (const el of cands) {
    for (let p = el.parentElement; p && !outer.has(p); p = p.parentElement) outer.add(p);
  }
  const ids = [];
  for (const el of cands) {
    if (outer.has(el)) continue;
    const r = el.getClientRects()[0];
    if (!r) continue;
    if (Math.min(vw, r.right) - Math.max(0, r.left) > 0 || Math.min(vh, r.bottom) - Math.max(0, r.top) > 0) {
      const id = String(ids.length);
      el.setAttribute(ATTR, id);
      ids.push(id);
    }
  }

  // 2. the attributes the harness reads (its prepare.js writes them onto the page; here they are computed)
  const chosen = new Set();
  for (const s of document.querySelectorAll("select")) { const o = s.options[s.selectedIndex]; if (o) chosen.add(o); }
  function attrs(el, tag) {
    const v = {};
    for (const k of KEEP) { const x = el.getAttribute(k); if (x != null) v[k] = x; }
    const r = el.getClientRects()[0];
    if (r) {
      const L = Math.round(r.left), T = Math.round(r.top);
      v["data-bbox"] = `${L},${T},${Math.round(r.right) - L},${Math.round(r.bottom) - T}`;
    }
    if (el.hasChildNodes()) {
      v["data-text"] = Array.from(el.childNodes).filter(n => n.nodeType === 3)
        .map(n => n.textContent.trim().replace(/\s{2,}/g, " ")).filter(t => t).join(",");
    }
    if (tag === "select") { v["data-value"] = el.value; v["data-text"] = el.options[el.selectedIndex]?.text || ""; }
    if (tag === "input" && (el.getAttribute("type") || "") === "checkbox") v["data-status"] = el.checked ? "checked" : "not-checked";
    if (chosen.has(el)) v["data-status"] = "selected";
    if (tag === "input" || tag === "textarea") v["data-value"] = el.value;
    const out = [];
    for (const k of KEEP) {
      if (!(k in v) || (k === "type" && v[k] === "hidden")) continue;
      const s = squash(String(v[k]));
      if (s) out.push([k, s]);
    }
    return out;
  }
  function ownText(el) {  // the text before the first child element (lxml's .text once scripts are cut out)
    let t = "";
    for (const n of el.childNodes) {
      if (n.nodeType === 3) t += n.textContent;
      else if (n.nodeType === 1 && !GONE.has(tagOf(n))) break;
    }
    return squash(t);
  }
  function render(tag, label, text, inner, a) {
    const seen = new Set(), kv = [];
    for (const [k, x] of a) { if (!seen.has(x)) { seen.add(x); kv.push(`${k}="${x}"`); } }
    return "<" + tag + (label ? ` id="${label}"` : "") + (kv.length ? " " + kv.join(" ") : "") + ">"
      + (text ? " " + text : "") + (inner ? " " + inner : "") + " </" + tag + ">";
  }

  // 3. the page as the harness prints it
  function walk(el, inShownSelect) {
    const tag = tagOf(el);
    const a = attrs(el, tag);
    const box = a.find(([k]) => k === "data-bbox");
    let inView = false;
    if (box && el.getAttribute("aria-hidden") !== "true") {
      const [x, y, w, h] = box[1].split(",").map(Number);
      inView = !(x + w < 0 || x > W || y + h < 0 || y > H);
    }
    const label = el.getAttribute(ATTR) || "";
    let keep = inView || (inShownSelect && tag === "option") || !!label;
    const text = ownText(el);
    const hasText = text.length > 0 || a.some(([k]) => k !== "data-bbox");
    const parts = [];
    let withText = 0;
    for (const c of el.children) {
      if (GONE.has(tagOf(c))) continue;
      const [s, t] = walk(c, keep && tag === "select");
      if (t) withText++;
      if (s) parts.push(s);
    }
    const inner = parts.join(" ");
    keep = keep && (withText > 1 || hasText || (!!label && inView));
    return [keep ? render(tag, label, text, inner, a) : inner, withText > 0 || hasText];
  }
  return [walk(de, false)[0], ids];
}
"""


def webrl_selector(element_id: str) -> str:
    """The element the "webrl" observation showed as id="N" (the harness finds it the same way,
    processors.py:1258)."""
    return f'[{WEBRL_ID_ATTR}="{element_id}"]'
