"""HunyuanOCR-1.5's doc_parse normalisation (ms_ocr/models/hunyuan_vl/markdown.py): a case for each rewrite of
Tencent's normalize_doc_parse_markdown (Tencent-Hunyuan/HunyuanOCR inference/utils/output_utils.py, commit
c55965d3), the cases built from its patterns and guards, and the answers it gives them."""

import pytest

from ms_ocr.models.hunyuan_vl.markdown import normalize_doc_parse_markdown

CASES = {
    # U: coordinates ending a line go; a bare coordinate line is dropped; tables, math and mid-line pairs stay
    "U_trailing": ("数据来源于高德地图驾车导航数据(39,337),(512,900)\n(147,90),(925,415)\n正文",
                   "数据来源于高德地图驾车导航数据\n正文", {"U_coord_text": 1, "U_coord_bare": 1}),
    "U_several_pairs": ("图 1 (1,2),(3,4)，(5,6),(7,8)  ", "图 1", {"U_coord_text": 1}),
    "U_kept": ("<td>a(1,2),(3,4)</td>\nset $\\{(2,4),(3,3)\\}$\nsee (1,2),(3,4) here",
               "<td>a(1,2),(3,4)</td>\nset $\\{(2,4),(3,3)\\}$\nsee (1,2),(3,4) here", {}),
    # T: the caption before the table, a stray <td> before the first row dropped
    "T": ('<table border="1"><caption> Table 2: sales </caption><td><tr><td>1</td></tr></table>',
          'Table 2: sales\n\n<table border="1"><tr><td>1</td></tr></table>', {"T_captions": 1}),
    "T_empty_caption": ("<table><caption> </caption><tr><td>1</td></tr></table>",
                        "<table><caption> </caption><tr><td>1</td></tr></table>", {}),
    # E: array{l} paragraphs split by \\ \\ become blocks, one pair of outer braces removed
    "E": ("$$\\begin{array}{l}{a=1}\\\\ \\\\ b=2\\\\\\end{array}$$", "\n\n$$ a=1 $$\n\n$$ b=2 $$\n\n",
          {"E_blocks": 1}),
    # C: independent rows of cases/aligned become \[ \] blocks; an aligned derivation stays whole
    "C": ("\\[\\begin{gathered}x=1\\\\[2pt] y=2\\end{gathered}\\]", "\n\n\\[ x=1 \\]\n\n\\[ y=2 \\]\n\n",
          {"C_blocks": 1}),
    "C_aligned_kept": ("$$\\begin{aligned}x&=a\\\\&=b\\end{aligned}$$", "$$\\begin{aligned}x&=a\\\\&=b\\end{aligned}$$",
                       {}),
    "C_continuation_kept": ("$$\\begin{split}x=a+b\\\\=c\\end{split}$$", "$$\\begin{split}x=a+b\\\\=c\\end{split}$$",
                            {}),
    # C2: a worksheet of '&'-separated equations becomes one block per equation
    "C2": ("$$\\begin{array}{lll}1+1=&2+2=&\\\\3+3=&4+4=\\end{array}$$",
           "\n\n\\[ 1+1= \\]\n\n\\[ 2+2= \\]\n\n\\[ 3+3= \\]\n\n\\[ 4+4= \\]\n\n", {"C2_blocks": 1, "C2_cells": 4}),
    # D: \left without \right gets \right. before the last \end; \right without \left gets \left. after \begin
    "D_right": ("$$\\begin{cases}\\left( x\\end{cases}$$", "$$\\begin{cases}\\left( x\\right. \\end{cases}$$",
                {"D_blocks": 1, "D_inserts": 1}),
    "D_left": ("\\[ a \\right) \\right] \\]", "\\[ \\left.\\left. a \\right) \\right] \\]",
               {"D_blocks": 1, "D_inserts": 2}),
    # A: an inline formula alone on its line, long or with a rich token, becomes a display block
    "A": ("text\n  $\\frac{a}{b}$ \n$x$", "text\n\n\n$$ \\frac{a}{b} $$\n\n\n$x$", {"A_blocks": 1}),
    "A_long": ("$a+b+c+d+e+f+g+h$", "\n\n$$ a+b+c+d+e+f+g+h $$\n\n", {"A_blocks": 1}),
    # W: bare arithmetic lines, several drills on one line split at 2+ spaces
    "W": ("50÷8=\n315÷3.5=90     31.2×6=5.2\n年龄 3+4=7", "$$ 50\\div 8= $$\n$$ 315\\div 3.5=90 $$\n"
          "$$ 31.2\\times 6=5.2 $$\n年龄 3+4=7", {"W_lines": 3}),
    # F: equation numbers leave display blocks (a trailing "(2.1)" with the spaces before it)
    "F": ("$$ E=mc^2 \\tag{1.2} $$ and \\[ x=y \\quad (3) \\] and $$ a=b+c+d (2.1) $$",
          "$$ E=mc^2 $$ and \\[ x=y \\] and $$ a=b+c+d$$", {"F_blocks": 3, "F_strips": 3}),
    # V: a leading '&' and surplus closing braces at the end go (three fixes: the '&' and two braces)
    "V": ("$$ & x = {a}} } $$", "$$  x = {a}  $$", {"V_blocks": 1, "V_fixes": 3}),
    "V_escaped_brace_kept": ("$$ x \\} $$", "$$ x \\} $$", {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_rewrite(name):
    text, want, stats = CASES[name]
    got, got_stats = normalize_doc_parse_markdown(text)
    assert got == want
    assert {k: v for k, v in got_stats.items() if v} == stats


def test_rewrites_run_in_the_reference_order():
    """U before A: the coordinates go first, then the formula alone on its line is promoted; E before C: the
    array{l} is split before any environment rule sees it; F after A: the promoted block loses its number."""
    text = "$\\frac{1}{2} \\quad (4)$(10,20),(30,40)"
    got, stats = normalize_doc_parse_markdown(text)
    assert got == "\n\n$$ \\frac{1}{2} $$\n\n"
    assert stats == {"U_coord_text": 1, "A_blocks": 1, "F_blocks": 1, "F_strips": 1}


def test_plain_text_is_unchanged():
    text = "# Title\n\nA paragraph with $x$ inline and a list:\n- one\n- two (3)\n"
    assert normalize_doc_parse_markdown(text) == (text, {})
