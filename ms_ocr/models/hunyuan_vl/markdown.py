"""HunyuanOCR-1.5's doc_parse answer normalisation, as Tencent's clients apply it after the repeat clean-up:
`normalize_doc_parse_markdown` of Tencent-Hunyuan/HunyuanOCR inference/utils/output_utils.py (commit c55965d3),
rewritten here with the same ten rewrites in the same order. Tencent applies it to doc_parse answers only (other
tasks' formats would be damaged).

The rewrites, by the reference's letters:
  U  layout coordinates "(x1,y1),(x2,y2)" ending a line are removed (a line of nothing else is dropped), except in
     lines with HTML table tags and inside math;
  T  a table's <caption> moves before the table as a paragraph;
  E  a display block that is one array{l} of rows split by a double line break becomes one block per row;
  C  a display block that is one aligned/align/align*/split/cases/gather/gathered environment of independent rows
     (no '&', no row continuing the one before) becomes one \\[ \\] block per row;
  C2 a display block that is one array of '&'-separated independent equations becomes one block per equation;
  D  unbalanced \\left / \\right in a display block are completed with \\right. / \\left.;
  A  an inline formula alone on its line becomes a display block when it is long or holds a rich token;
  W  a line of bare arithmetic ("50÷8=") becomes a display block per drill, ÷ / × as \\div / \\times;
  F  equation numbers (\\tag{..}, \\quad (1), \\cdots\\cdots (1), a trailing "(1.2)") leave display blocks;
  V  a leading bare '&' and surplus closing braces at the end leave display blocks.
A "display block" is $$...$$ (all of them first) or \\[...\\] (then).
"""

import re
from collections import Counter

_DOLLARS = re.compile(r"\$\$([\s\S]*?)\$\$")
_BRACKETS = re.compile(r"\\\[([\s\S]*?)\\\]")
_ROW_BREAK = r"\\\\(?:\s*\[[^\]]*\])?"  # "\\", optionally with a spacing argument ("\\[3pt]")


def _each_display_block(text, rewrite):
    """Apply rewrite(inner, dollars) -> replacement or None (keep) to every $$ block, then to every \\[ \\] block."""
    def apply(pattern, dollars, text):
        def one(m):
            out = rewrite(m.group(1), dollars)
            return m.group(0) if out is None else out
        return pattern.sub(one, text)
    return apply(_BRACKETS, False, apply(_DOLLARS, True, text))


def _keeping_delimiters(fix):
    """A display-block rewrite that changes only the inner text: fix(inner) -> (inner, edits)."""
    def rewrite(inner, dollars):
        new, edits = fix(inner)
        if not edits:
            return None
        return f"$${new}$$" if dollars else f"\\[{new}\\]"
    return rewrite


def _blocks(parts, dollars):
    """Parts as separate display blocks, a blank line around each."""
    wrap = (lambda p: f"$$ {p} $$") if dollars else (lambda p: f"\\[ {p} \\]")
    return "\n\n" + "\n\n".join(wrap(p) for p in parts) + "\n\n"


# U: layout coordinates ----------------------------------------------------------------------------------------
_PAIR = r"\(\d{1,4},\d{1,4}\),\(\d{1,4},\d{1,4}\)"
_HAS_PAIR = re.compile(_PAIR)
_PAIRS_AT_END = re.compile(r"(?:[ \t,，]*" + _PAIR + r")+[ \t]*$")
_MATH_SPAN = re.compile(r"\$\$[\s\S]*?\$\$|\$[^$\n]+\$|\\\[[\s\S]*?\\\]")
_MASK = re.compile("\x00U(\\d+)\x00")
_TABLE_TAGS = ("<table", "<tr", "<td", "</td")


def strip_layout_coordinates(text, stats):
    spans = []

    def mask(m):
        spans.append(m.group(0))
        return f"\x00U{len(spans) - 1}\x00"

    kept = []
    for line in _MATH_SPAN.sub(mask, text).split("\n"):
        lower = line.lower()
        if any(tag in lower for tag in _TABLE_TAGS) or not _HAS_PAIR.search(line):
            kept.append(line)
            continue
        rest = _PAIRS_AT_END.sub("", line)
        if rest == line:  # coordinates inside the line, not ending it: left alone
            kept.append(line)
        elif rest.strip():
            stats["U_coord_text"] += 1
            kept.append(rest.rstrip())
        else:
            stats["U_coord_bare"] += 1
    return _MASK.sub(lambda m: spans[int(m.group(1))], "\n".join(kept))


# T: table captions --------------------------------------------------------------------------------------------
_CAPTIONED = re.compile(r"<table([^>]*)>\s*<caption[^>]*>([\s\S]*?)</caption>\s*([\s\S]*?)</table>", re.I)
_STRAY_CELL = re.compile(r"^<td>\s*(?=<tr>)", re.I)


def move_table_captions(text, stats):
    def one(m):
        caption = m.group(2).strip()
        if not caption:
            return m.group(0)
        stats["T_captions"] += 1
        body = _STRAY_CELL.sub("", m.group(3).strip())
        return f"{caption}\n\n<table{m.group(1) or ''}>{body}</table>"
    return _CAPTIONED.sub(one, text)


# E: array{l} paragraphs ---------------------------------------------------------------------------------------
_PARAGRAPH_BREAK = re.compile(r"\\\\\s*\\\\")
_ARRAY_L = re.compile(r"\\begin\{array\}\{l\}([\s\S]*?)\\end\{array\}")
_TRAILING_BREAK = re.compile(r"\\\\$")


def _unbrace(part):
    """{x} -> x when the outer braces enclose all of x (x's own braces balanced)."""
    if not (part.startswith("{") and part.endswith("}")):
        return part
    depth = 0
    for ch in part[1:-1]:
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return part
    return part[1:-1].strip() if depth == 0 else part


def _array_l_rows(inner, dollars, stats):
    m = _ARRAY_L.fullmatch(inner.strip())
    if not m or not _PARAGRAPH_BREAK.search(m.group(1)):
        return None
    rows = [_unbrace(_TRAILING_BREAK.sub("", p.strip()).strip()) for p in _PARAGRAPH_BREAK.split(m.group(1))]
    rows = [r for r in rows if r]
    if len(rows) < 2:
        return None
    stats["E_blocks"] += 1
    return _blocks(rows, dollars)


# C: rows of a multi-row environment ---------------------------------------------------------------------------
_ROW_ENV = re.compile(r"\\begin\{(aligned|align\*|align|split|cases|gather|gathered)\}([\s\S]*?)\\end\{\1\}")
_CONTINUES = re.compile(r"^(?:&|=|\+|-|<|>|\\(?:approx|geq|leq|le|ge|times|cdot|pm|mp|Rightarrow|rightarrow|to|"
                        r"equiv))")


def _env_rows(inner, dollars, stats):
    m = _ROW_ENV.fullmatch(inner.strip())
    if not m:
        return None
    rows = [r.strip() for r in re.split(_ROW_BREAK, m.group(2)) if r.strip()]
    if len(rows) < 2 or any("&" in r for r in rows) or any(_CONTINUES.match(r) for r in rows[1:]):
        return None  # one formula over several lines: kept whole
    stats["C_blocks"] += 1
    return _blocks(rows, False)


# C2: worksheets of independent equations in one array ---------------------------------------------------------
_ANY_ARRAY = re.compile(r"\\begin\{array\}\{[lrc|]+\}([\s\S]*?)\\end\{array\}")
_CELL_CONTINUES = re.compile(r"^(?:=|\+|-|<|>|\\(?:approx|times|div|leq|geq|le|ge|cdot))")


def _is_equation(cell):
    cell = cell.strip()
    return bool(cell) and not _CELL_CONTINUES.match(cell) and ("=" in cell or "\\approx" in cell)


def _array_equations(inner, dollars, stats):
    m = _ANY_ARRAY.fullmatch(inner.strip())
    if not m:
        return None
    rows = [r for r in re.split(_ROW_BREAK, m.group(1)) if r.strip()]
    if len(rows) < 2 or sum("&" in r for r in rows) < 2:
        return None
    cells = []
    for row in rows:
        filled = [c for c in row.split("&") if c.strip()]
        if not filled or not all(_is_equation(c) for c in filled):
            return None
        cells += [c.strip() for c in filled]
    if len(cells) < 2:
        return None
    stats["C2_blocks"] += 1
    stats["C2_cells"] += len(cells)
    return _blocks(cells, False)


# D: \left / \right balance ------------------------------------------------------------------------------------
_LEFT = re.compile(r"\\left(?![a-zA-Z@])")
_RIGHT = re.compile(r"\\right(?![a-zA-Z@])")


def balance_left_right(content):
    """(content, insertions): missing \\right. before the last \\end{..} (else at the end), missing \\left. after
    the first \\begin{..} (else at the start)."""
    missing = len(_LEFT.findall(content)) - len(_RIGHT.findall(content))
    if missing > 0:
        ends = list(re.finditer(r"\\end\{[^}]+\}", content))
        if ends:
            at = ends[-1].start()
            return content[:at] + "\\right." * missing + " " + content[at:], missing
        return content.rstrip() + " " + "\\right." * missing, missing
    if missing < 0:
        begin = re.search(r"\\begin\{[^}]+\}", content)
        at = begin.end() if begin else 0
        return content[:at] + " " + "\\left." * -missing + content[at:], -missing
    return content, 0


# A: inline formulas alone on a line ---------------------------------------------------------------------------
_INLINE_LINE = re.compile(r"^[ \t]*\$([^$\n]+?)\$[ \t]*$", re.M)
_RICH_TOKENS = ("frac", "sum", "int", "prod", "therefore", "because", "forall", "exists", "begin", "left", "right",
                "sqrt", "partial", "nabla", "infty", "cdot", "times", "div", "leq", "geq", "neq", "approx", "equiv",
                "to", "rightarrow", "leftarrow", "leftrightarrow", "cap", "cup", "in", "notin", "subset", "supseteq",
                "cong", "sim")
_RICH = re.compile(r"\\(?:" + "|".join(_RICH_TOKENS) + r")\b")


def promote_inline_lines(text, stats):
    def one(m):
        formula = m.group(1).strip()
        if len(formula) < 15 and not _RICH.search(formula):
            return m.group(0)
        stats["A_blocks"] += 1
        return f"\n\n$$ {formula} $$\n\n"
    return _INLINE_LINE.sub(one, text)


# W: bare arithmetic lines -------------------------------------------------------------------------------------
_ARITHMETIC = re.compile(r"^[\d\s×÷+\-=.,()（）]+$")
_DIGIT_OP_DIGIT = re.compile(r"\d\s*[+\-]\s*\d")


def _is_drill(line):
    s = line.strip()
    return (3 <= len(s) <= 80 and "=" in s and bool(_ARITHMETIC.match(s))
            and ("÷" in s or "×" in s or bool(_DIGIT_OP_DIGIT.search(s))))


def promote_arithmetic_lines(text, stats):
    out = []
    for line in text.split("\n"):
        if not _is_drill(line):
            out.append(line)
            continue
        s = line.strip()
        parts = [p.strip() for p in re.split(r"\s{2,}", s) if p.strip()]
        for drill in parts if len(parts) >= 2 and all("=" in p for p in parts) else [s]:
            out.append("$$ " + drill.replace("÷", "\\div ").replace("×", "\\times ") + " $$")
            stats["W_lines"] += 1
    return "\n".join(out)


# F: equation numbers ------------------------------------------------------------------------------------------
_NUMBERINGS = (re.compile(r"\\tag\s*\{[^}]*\}\s*"),
               re.compile(r"\\q?quad\s*\{?\s*\((\d[\d.\-]*)\)\s*\}?\s*$"),
               re.compile(r"(?:\\cdots){2,}\s*\((\d[\d.\-]*)\)\s*$"))
_TRAILING_NUMBER = re.compile(r"\s+\((\d[\d.\-]+)\)\s*$")


def strip_equation_numbers(content):
    count = 0
    for pattern in _NUMBERINGS:
        m = pattern.search(content)
        while m:
            content, count = content[:m.start()] + content[m.end():], count + 1
            m = pattern.search(content)
    m = _TRAILING_NUMBER.search(content)
    if m and m.start() > 5:  # not the "(i,t)" of a short formula's start
        content, count = content[:m.start()].rstrip(), count + 1
    return content, count


# V: display-block repairs -------------------------------------------------------------------------------------
def _brace_depth(s):
    depth, i = 0, 0
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        depth += (s[i] == "{") - (s[i] == "}")
        i += 1
    return depth


def repair_display_block(content):
    """(content, fixes): a leading bare '&' removed; closing braces beyond the opened ones removed from the end
    (never an escaped one, never one inside)."""
    original, fixes = content, 0
    unaligned = re.sub(r"^(\s*)&", r"\1", content, count=1)
    if unaligned != content:
        content, fixes = unaligned, fixes + 1
    surplus = -_brace_depth(content)
    while surplus > 0:
        m = re.search(r"\}\s*$", content)
        if not m:
            break
        slashes = len(content[:m.start()]) - len(content[:m.start()].rstrip("\\"))
        if slashes % 2:
            break
        content = content[:m.start()] + content[m.start() + 1:]
        surplus, fixes = surplus - 1, fixes + 1
    return content, fixes if content != original else 0


# the driver ---------------------------------------------------------------------------------------------------
def normalize_doc_parse_markdown(text):
    """(text, {rewrite counter: count}) of a doc_parse answer, the ten rewrites in the reference's order."""
    stats = Counter()

    def counted(fix, blocks, edits=None):
        def one(inner):
            new, n = fix(inner)
            if n:
                stats[blocks] += 1
                if edits:
                    stats[edits] += n
            return new, n
        return _keeping_delimiters(one)

    text = strip_layout_coordinates(text, stats)
    text = move_table_captions(text, stats)
    text = _each_display_block(text, lambda inner, dollars: _array_l_rows(inner, dollars, stats))
    text = _each_display_block(text, lambda inner, dollars: _env_rows(inner, dollars, stats))
    text = _each_display_block(text, lambda inner, dollars: _array_equations(inner, dollars, stats))
    text = _each_display_block(text, counted(balance_left_right, "D_blocks", "D_inserts"))
    text = promote_inline_lines(text, stats)
    text = promote_arithmetic_lines(text, stats)
    text = _each_display_block(text, counted(strip_equation_numbers, "F_blocks", "F_strips"))
    text = _each_display_block(text, counted(repair_display_block, "V_blocks", "V_fixes"))
    return text, dict(stats)
