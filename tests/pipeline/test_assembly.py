"""The pipeline's model-free output parts, on hand-made cases, as PaddleX 3.7.2 writes them: region tasks, output
cleaning (repetition from 50 characters, 5,000 for tables; LaTeX delimiters; OTSL tables), reading numbers and the
Markdown of every label (layout rules: test_layout_rules.py; crops and merging: test_crops_merge.py)."""

from ms_ocr.pipeline import regions
from ms_ocr.pipeline.markdown import Block, number_blocks, page_markdown
from ms_ocr.pipeline.otsl import otsl_to_html


def test_region_tasks():
    assert [regions.region_task(x) for x in ("text", "doc_title", "table", "display_formula", "inline_formula",
                                             "chart", "image", "seal", "header_image", "formula_number")] == \
        ["text", "text", "table", "formula", "formula", None, None, None, None, "text"]
    assert regions.region_task("chart", charts=True) == "chart"


def test_truncate_repetition():
    unit = "the same words "
    looped = "A real start of a sentence. " + unit * 12
    assert regions.truncate_repetition(looped) == "A real start of a sentence."
    assert regions.truncate_repetition("ab" * 30) == "ab"
    assert regions.truncate_repetition("\n".join(["a row"] * 12)) == "a row"
    fine = "A normal paragraph.\nWith two lines."
    assert regions.truncate_repetition(fine) == fine
    # looked at only from 50 characters (PaddleX 3.7's min_count; 3.3 had none), tables from 5,000
    assert regions.truncate_repetition("ab" * 24) == "ab" * 24
    assert regions.truncate_repetition("\n".join(["row"] * 12)) == "\n".join(["row"] * 12)  # 47 characters
    assert regions.clean("ab" * 30, "table", "table") == "ab" * 30
    assert regions.clean("ab" * 30, "text", "text") == "ab"


def test_latex_delimiters():
    """PaddleX 3.7: \\) becomes " $" (3.3: " $ "), doubled \\[\\[ \\]\\] are made single first."""
    assert regions.normalise_math("\\[x^2\\]", "display_formula") == " $$ x^2 $$ "
    assert regions.normalise_math("\\[\\[x\\]\\]", "display_formula") == " $$ x $$ "
    assert regions.normalise_math("so \\(a$b\\) holds", "text") == "so  $ ab $ holds"
    assert regions.normalise_math("\\((1)\\)", "formula_number") == "  (1) "
    assert regions.normalise_math("plain $x$", "text") == "plain $x$"


def test_otsl_to_html_spans_and_ragged_rows():
    otsl = "<fcel>Name<fcel>Score<lcel><nl><fcel>a<fcel>1<fcel>2<nl><ucel><fcel>3<ecel><nl>"
    assert otsl_to_html(otsl) == ('<table><tr><td>Name</td><td colspan="2">Score</td></tr>'
                                  '<tr><td rowspan="2">a</td><td>1</td><td>2</td></tr>'
                                  '<tr><td>3</td><td></td></tr></table>')
    ragged = "<fcel>x<fcel>y<nl><fcel>1<nl><fcel>2<fcel>3<ecel><nl><fcel>5<fcel>6<nl>"  # widths 2, 1, 3, 2 -> 2
    assert otsl_to_html(ragged) == ("<table><tr><td>x</td><td>y</td></tr><tr><td>1</td><td></td></tr>"
                                    "<tr><td>2</td><td>3</td></tr><tr><td>5</td><td>6</td></tr></table>")
    # a row's last text cell is never cut: here the width must be 3
    assert otsl_to_html("<fcel>x<nl><fcel>1<fcel>2<fcel>3<nl><fcel>y<nl>").count("<td></td>") == 4
    assert otsl_to_html("<fcel>a&b<xcel><nl><xcel><xcel><nl>") == '<table><tr><td rowspan="2" colspan="2">a&amp;b</td></tr><tr></tr></table>'
    assert otsl_to_html("no table here") == ""
    assert regions.clean("<fcel>1<fcel>2<nl>", "table", "table") == "<table><tr><td>1</td><td>2</td></tr></table>"


def _blk(i, label, content="", box=(0, 0, 100, 50), image=None):
    return Block(i, label, box, 0.9, content=content, image=image)


def test_markdown_of_a_page():
    """PaddleX 3.7.2's Markdown (tests before 2026-12 pinned PaddleOCR 3.3's: formulas wrapped in $$, tables
    `width: max-content`, headers and page numbers numbered, "3. Results" one level up)."""
    blocks = number_blocks([
        _blk(0, "header", "Running head"), _blk(1, "doc_title", "A Long-\nTitle"),
        _blk(2, "abstract", "Abstract We study things."), _blk(3, "paragraph_title", "1 Introduction"),
        _blk(4, "text", "First line\nsecond line"), _blk(5, "paragraph_title", "1.2 Setup."),
        _blk(6, "display_formula", "E=mc^2"), _blk(7, "display_formula", " $$ a+b $$ "),
        _blk(8, "formula_number", "(1)"), _blk(9, "table", "<table><tr><td>1</td></tr></table>"),
        _blk(10, "image", box=(0, 0, 300, 200), image="imgs/img_in_image_box_0_0_300_200.jpg"),
        _blk(11, "figure_title", "Figure 1:\nthings"), _blk(12, "footer", "Page 3"), _blk(13, "number", "3")])
    assert [b.order for b in blocks] == [None, 1, 2, 3, 4, 5, 6, 7, 8, None, None, None, None, None]
    md = page_markdown(blocks, 600)
    assert md == "\n\n".join([
        "# A LongTitle", "## Abstract\n We study things.", "## 1 Introduction", "First line", "second line",
        "### 1.2 Setup", "E=mc^2", " $$ a+b $$ ",
        "\n<table border=1 style='margin: auto; word-wrap: break-word;'><tr><td style='text-align: center; "
        "word-wrap: break-word;'>1</td></tr></table>",
        '<div style="text-align: center;"><img src="imgs/img_in_image_box_0_0_300_200.jpg" alt="Image" '
        'width="50%" /></div>\n',
        '<div style="text-align: center;">Figure 1: things</div>\n'])
    everything = page_markdown(blocks, 600, ignore=())
    assert everything.startswith("Running head\n\n# A LongTitle") and everything.endswith("Page 3\n\n3")
    assert [b.order for b in number_blocks(blocks, ignore=())][-2:] == [None, 9]  # shown numbers are numbered


def test_markdown_of_the_other_labels():
    chart = _blk(0, "chart", "Year | Sales\n2024 | 3")
    assert page_markdown([chart], 600, charts=True) == (
        "<table border=1 style='margin: auto; width: max-content;'>\n  <thead><tr><th style='text-align: "
        "center;'>Year</th><th style='text-align: center;'>Sales</th></tr></thead>\n  <tbody>\n    <tr><td "
        "style='text-align: center;'>2024</td><td style='text-align: center;'>3</td></tr>\n  </tbody>\n</table>")
    pictured = _blk(0, "chart", box=(0, 0, 150, 50), image="imgs/c.jpg")
    assert page_markdown([pictured], 600) == '<div style="text-align: center;"><img src="imgs/c.jpg" alt="Image" ' \
        'width="25%" /></div>\n'
    assert page_markdown([_blk(0, "reference", "\nReferences\n[1] A.")], 600) == "\n## References\n[1] A."
    # the two replacements run one after the other: a hyphen break gets both line-break suffixes
    assert page_markdown([_blk(0, "content", "1 Intro-\n2 Methods\n3")], 600) == "1 Intro    \n2 Methods  \n3"
    assert page_markdown([_blk(0, "algorithm", "\nfor i:\n  x\n")], 600) == "for i:\n  x"
    assert page_markdown([_blk(0, "vertical_text", "a\n\nb")], 600) == "a\n\nb"
    # every block with a Markdown form adds "\n\n" + its text, an empty one too (a merged group's member)
    merged = [_blk(0, "text", "both lines"), _blk(1, "text", ""), _blk(2, "text", "next")]
    assert page_markdown(merged, 600) == "both lines\n\n\n\nnext"
    assert page_markdown([_blk(0, "text", ""), _blk(1, "text", "x")], 600) == "x"  # nothing before: no separator
    assert page_markdown([_blk(0, "formula_number", "(2)"), _blk(1, "seal", image="imgs/s.jpg")], 100) == \
        '<div style="text-align: center;"><img src="imgs/s.jpg" alt="Image" width="100%" /></div>\n'


def test_title_levels():
    """PaddleX 3.7.2 format_title: the numbering (arabic, CJK, parenthesised, Roman I-X followed by "." or a space)
    is rewritten "NUM text", a trailing "." goes, the level is 1 + the dots anywhere in the title. Words starting
    with a Roman-numeral letter stay whole."""
    titles = ("Introduction", "Vision Transformers", "2.1.3 Losses", "A.1 Proofs", "3. Results", "IV. Methods",
              "I Introduction", "1   Setup", "（一）总则", "二、方法", "Results of Fig. 3")
    assert page_markdown([_blk(0, "paragraph_title", t) for t in titles], 100).split("\n\n") == [
        "## Introduction", "## Vision Transformers", "#### 2.1.3 Losses", "### A.1 Proofs", "### 3. Results",
        "### IV. Methods", "## I Introduction", "## 1 Setup", "## （一） 总则", "## 二、 方法", "### Results of Fig. 3"]


def test_every_recognizer_has_a_prompt_for_every_region_kind():
    from ms_ocr import models
    from ms_ocr.pipeline.cli import build_parser
    from ms_ocr.pipeline.document import REGION_KINDS
    recognizers = next(a for a in build_parser()._actions if "--recognizer" in a.option_strings).choices
    assert recognizers == models.names()
    prompts = {}
    for name in recognizers:
        spec = models.get(name)
        assert sorted(spec.region_tasks) == sorted(REGION_KINDS)
        prompts[name] = {kind: spec.tasks[task] for kind, task in spec.region_tasks.items()}
    assert prompts["paddleocr-vl"] == {"text": "OCR:", "table": "Table Recognition:",
                                       "formula": "Formula Recognition:", "chart": "Chart Recognition:"}
    assert prompts["hunyuan-ocr"]["table"] == "把图中的表格解析为HTML。"
    assert prompts["deepseek-ocr"]["text"] == "Free OCR." and prompts["deepseek-ocr2"]["chart"] == "Parse the figure."
