"""The pipeline's model-free parts, on hand-made cases: layout filters (NMS, near-full-page images, containment,
overlap), region tasks and crops, output cleaning (repetition, LaTeX delimiters, OTSL tables) and Markdown."""

from PIL import Image, ImageDraw

from ms_ocr.models.pp_doclayout_v2 import LayoutBlock
from ms_ocr.pipeline import layout_filter as F
from ms_ocr.pipeline import regions
from ms_ocr.pipeline.markdown import Block, number_blocks, page_markdown
from ms_ocr.pipeline.otsl import otsl_to_html


def _b(label, box, score=0.9, order=0):
    return LayoutBlock(label, 0, score, tuple(float(v) for v in box), order)


def test_thresholds_of_the_pipeline():
    t = F.thresholds(["text", "seal", "table", "doc_title"], {"table": 0.7})
    assert t == {"text": 0.4, "seal": 0.45, "table": 0.7, "doc_title": 0.4}


def test_nms_same_label_vs_other_label():
    a = _b("text", (0, 0, 99, 99), 0.9, 0)
    same = _b("text", (0, 0, 99, 80), 0.8, 1)       # IoU (+1 px) = 81/100 >= 0.6: dropped
    other = _b("table", (0, 0, 99, 80), 0.8, 2)     # another label needs IoU >= 0.98: kept
    twin = _b("table", (0, 0, 99, 99), 0.7, 3)      # identical box of another label: dropped (by `a`)
    far = _b("text", (200, 0, 299, 99), 0.5, 4)
    assert [b.order for b in F.nms([a, same, other, twin, far])] == [0, 2, 4]


def test_page_sized_image_dropped_unless_alone():
    page = _b("image", (0, 0, 600, 790))            # 98.7 % of a portrait 600 x 800 page
    fig = _b("image", (10, 10, 300, 300))
    text = _b("text", (10, 400, 500, 500))
    assert F.drop_page_images([page, fig, text], 600, 800) == [fig, text]
    assert F.drop_page_images([page], 600, 800) == [page]
    wide = _b("image", (0, 0, 800, 500))            # 83 % of a landscape page: above its 82 % limit
    assert F.drop_page_images([wide, text], 800, 600) == [text]


def test_boxes_inside_titles_and_formulas_removed():
    title = _b("paragraph_title", (0, 0, 200, 40))
    inner = _b("text", (5, 5, 195, 38))             # entirely inside the title
    half = _b("text", (100, 0, 300, 40))            # half inside: kept
    formula = _b("display_formula", (0, 100, 300, 160))
    inline = _b("inline_formula", (20, 110, 80, 150))
    text = _b("text", (0, 200, 300, 300))
    big_text = _b("text", (0, 190, 400, 400))       # text is not a container label: `text` stays here
    assert F.drop_contained([title, inner, half, formula, inline, text, big_text]) == \
        [title, half, formula, text, big_text]


def test_overlap_filter_and_reference_blocks():
    text = _b("text", (0, 0, 300, 300))
    inline = _b("inline_formula", (10, 10, 60, 40))   # overlap 100 % of the smaller: smaller dropped
    fig = _b("image", (0, 400, 300, 700))
    caption = _b("figure_title", (0, 650, 300, 700))  # inside the image but another label: image pairs exempt
    ref = _b("reference", (0, 800, 300, 900))
    refc = _b("reference_content", (0, 810, 300, 850))
    assert F.drop_overlaps([text, inline, fig, caption, ref, refc]) == [text, fig, caption, refc]
    assert F.filter_blocks([text, _b("text", (5, 5, 5, 100))], 800, 1000) == [text]  # degenerate box


def test_region_tasks():
    assert [regions.region_task(x) for x in ("text", "doc_title", "table", "display_formula", "inline_formula",
                                             "chart", "image", "seal", "header_image", "formula_number")] == \
        ["text", "text", "table", "formula", "formula", None, None, None, None, "text"]
    assert regions.region_task("chart", charts=True) == "chart"


def test_crop_truncates_and_formula_trim():
    page = Image.new("RGB", (100, 80), "white")
    ImageDraw.Draw(page).rectangle([30, 20, 49, 29], fill=(10, 10, 10))
    region = regions.crop(page, (20.9, 10.2, 70.7, 50.99))
    assert region.size == (50, 40)
    assert regions.trim_to_ink(region).size == (20, 10)
    assert regions.crop(page, (10.2, 10, 10.9, 20)) is None
    blank = regions.crop(page, (0, 0, 10, 10))
    assert regions.trim_to_ink(blank) is blank


def test_truncate_repetition():
    unit = "the same words "
    looped = "A real start of a sentence. " + unit * 12
    assert regions.truncate_repetition(looped) == "A real start of a sentence."
    assert regions.truncate_repetition("ab" * 20) == "ab"
    lines = "\n".join(["row"] * 12)
    assert regions.truncate_repetition(lines) == "row"
    fine = "A normal paragraph.\nWith two lines."
    assert regions.truncate_repetition(fine) == fine


def test_latex_delimiters():
    assert regions.normalise_math("\\[x^2\\]", "display_formula") == " $$ x^2 $$ "
    assert regions.normalise_math("so \\(a$b\\) holds", "text") == "so  $ ab $  holds"
    assert regions.normalise_math("\\((1)\\)", "formula_number") == "  (1)  "
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
    blocks = number_blocks([
        _blk(0, "header", "Running head"), _blk(1, "doc_title", "A Long-\nTitle"),
        _blk(2, "abstract", "Abstract We study things."), _blk(3, "paragraph_title", "1 Introduction"),
        _blk(4, "text", "First line\nsecond line"), _blk(5, "paragraph_title", "1.2 Setup."),
        _blk(6, "display_formula", "E=mc^2"), _blk(7, "display_formula", " $$ a+b $$ "),
        _blk(8, "formula_number", "(1)"), _blk(9, "table", "<table><tr><td>1</td></tr></table>"),
        _blk(10, "image", box=(0, 0, 300, 200), image="imgs/img_in_image_box_0_0_300_200.jpg"),
        _blk(11, "figure_title", "Figure 1:\nthings"), _blk(12, "footer", "Page 3"), _blk(13, "number", "3")])
    assert [b.order for b in blocks] == [1, 2, 3, 4, 5, 6, 7, 8, None, None, None, None, 9, 10]
    md = page_markdown(blocks, 600)
    assert md == "\n\n".join([
        "# A LongTitle", "## Abstract\n We study things.", "## 1 Introduction", "First line", "second line",
        "### 1.2 Setup", "$$E=mc^2$$", "$$ a+b $$",
        "\n<table border=1 style='margin: auto; width: max-content;'><tr><td style='text-align: center;'>1</td>"
        "</tr></table>",
        '<div style="text-align: center;"><img src="imgs/img_in_image_box_0_0_300_200.jpg" alt="Image" '
        'width="50%" /></div>\n',
        '<div style="text-align: center;">Figure 1: things</div>\n'])
    everything = page_markdown(blocks, 600, ignore=())
    assert everything.startswith("Running head\n\n# A LongTitle") and everything.endswith("Page 3\n\n3")


def test_title_levels_do_not_split_words():
    """Unlike the reference's 3.3 numbering regex, words starting with a Roman-numeral letter stay whole."""
    blocks = [_blk(0, "paragraph_title", t) for t in ("Introduction", "Vision Transformers", "2.1.3 Losses",
                                                          "A.1 Proofs", "3. Results")]
    assert page_markdown(blocks, 100).split("\n\n") == ["## Introduction", "## Vision Transformers",
                                                         "#### 2.1.3 Losses", "### A.1 Proofs", "## 3. Results"]


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
