"""What the page at / draws and renders, in a real browser (tests/serve/browser.py) on the demo model's server, with
answers whose text is scripted in the served engine: a spotting answer's boxes (as many as the model's post-processing
parses, its quadrilaterals) linked to their text both ways; a document-pipeline result's blocks with reading-order
numbers and polygons; Markdown rendered as elements; markup in an answer or a result kept as text, never run."""

import json

from ms_ocr.models.paddleocr_vl.postprocess import parse_spotting
from tests.serve.browser import INVOICE, browser, demo_server, scripted, tab  # noqa: F401  (fixtures)


def test_a_spotting_answer_draws_its_boxes_linked_to_its_text(tab, scripted):
    items = [("Invoice #2041", (6, 10, 260, 10, 260, 900, 6, 900)),
             ("15 Mar 2026", (480, 40, 640, 60, 630, 950, 470, 930)),
             ("$1,284.50", (800, 30, 995, 30, 995, 960, 800, 960))]
    text = "".join(label + "".join(f"<|LOC_{v}|>" for v in locs) for label, locs in items)
    scripted(text)
    page = tab.open()
    assert tab.read(INVOICE, task="spotting").startswith("Done")
    want = parse_spotting(text, 500, 34)
    assert [w["text"] for w in want] == [label for label, _ in items]
    assert page.locator("#overlay .item").count() == len(want) == 3
    assert page.locator("#overlay .item polygon").count() == 3  # each item's quadrilateral
    points = page.locator("#overlay .item polygon").first.get_attribute("points")
    assert [[float(v) for v in p.split(",")] for p in points.split()] == want[0]["poly"]
    assert page.locator("#rendered li").all_text_contents() == [w["text"] for w in want]
    page.hover("#overlay .item[data-i='1'] polygon")
    assert "hot" in page.get_attribute("#rendered li[data-i='1']", "class")
    page.hover("#rendered li[data-i='2']")
    assert "hot" in page.get_attribute("#overlay .item[data-i='2']", "class")
    assert "hot" not in (page.get_attribute("#overlay .item[data-i='1']", "class") or "")
    # the page sent the task as PaddleX does: its special tokens kept, its pixel range
    assert tab.chats[0]["skip_special_tokens"] is False
    assert tab.chats[0]["mm_processor_kwargs"] == {"min_pixels": 112896, "max_pixels": 1605632}


MARKUP = ('<script>window.__pwned = 1</script>\n<img src=x onerror="window.__pwned = 2">\n\n| a | <b>b</b> |\n'
          '|---|---|\n| <img src=y onerror="window.__pwned = 3"> | [x](javascript:window.__pwned=4) |\n\n'
          '<table><tr><td><script>window.__pwned = 5</script></td><td><img src=z onerror="window.__pwned = 6"></td>'
          '</tr></table>\n**bold** <svg onload="window.__pwned = 7">')


def test_markup_in_an_answer_is_text(tab, scripted):
    scripted(MARKUP)
    page = tab.open()
    assert tab.read(INVOICE).startswith("Done")
    assert page.text_content("#raw") == MARKUP
    page.wait_for_timeout(300)
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#answer script, #answer img, #answer svg, #answer [onerror], #answer [onload]").count() == 0
    assert page.locator("#answer a").count() == 0  # a javascript: link is its text
    rendered = page.text_content("#rendered")
    assert "<script>window.__pwned = 1</script>" in rendered and '<img src=z onerror="window.__pwned = 6">' in rendered
    assert page.locator("#rendered table").count() == 2
    assert page.locator("#rendered strong").all_text_contents() == ["bold"]


def test_a_pipeline_result_draws_numbered_blocks_and_polygons(tab, tmp_path):
    blocks = [
        {"label": "text", "box": [4, 2, 150, 30], "order": 1, "content": "Invoice #2041"},
        {"label": "text", "box": [160, 2, 300, 30], "order": 2, "content": "due 15 Mar 2026",
         "points": [[160, 3], [300, 2], [299, 30], [161, 31]]},
        {"label": "number", "box": [330, 2, 496, 32], "order": 3, "content": "$1,284.50",
         "points": [[330, 2], [496, 2], [496, 20], [420, 32], [330, 32]]},
        {"label": "header", "box": [0, 0, 500, 2], "order": None,
         "content": '<img src=x onerror="window.__pwned = 8">'},
    ]
    record = {"width": 500, "height": 34, "blocks": [blocks[2], blocks[3], blocks[0], blocks[1]]}
    path = tmp_path / "invoice.json"
    path.write_text(json.dumps(record))
    page = tab.open()
    page.set_input_files("#file", INVOICE)
    page.set_input_files("#result-file", str(path))
    from playwright.sync_api import expect
    expect(page.locator("#status")).to_contain_text("4 blocks in reading order")
    assert page.locator("#overlay .item").count() == len(record["blocks"])
    assert page.locator("#overlay .item polygon").count() == 2
    assert page.locator("#overlay .item text").all_text_contents() == ["1", "2", "3"]  # the unnumbered has none
    assert page.locator("#rendered li .entry-text").all_text_contents() == [b["content"] for b in blocks]
    page.hover("#overlay .item[data-i='2'] polygon")
    assert "hot" in page.get_attribute("#rendered li[data-i='2']", "class")
    assert page.evaluate("() => window.__pwned") is None and page.locator("#answer img").count() == 0


MARKDOWN = r"""# Report

Revenue grew **12 %** to *4.2 M* (`table 2`), and \(a_1 \times b_2\) holds.
Its second line, $1,284.50 paid.

- first
- second
  1. nested

| region | Q1 |
|:---|---:|
| north | 1.2 |

<table><tr><th>name</th><th colspan="2">values</th></tr><tr><td>a &amp; b</td><td>1</td><td>2<br>3</td></tr></table>

$$
\frac{1}{3} \\ x_1
$$

```
code <b> stays
```"""


def test_a_markdown_answer_is_rendered_as_elements(tab, scripted):
    scripted(MARKDOWN)
    page = tab.open()
    assert tab.read(INVOICE).startswith("Done")
    rendered = page.locator("#rendered")
    assert rendered.locator("h1").all_text_contents() == ["Report"]
    assert rendered.locator("strong").all_text_contents() == ["12 %"]
    assert rendered.locator("em").all_text_contents() == ["4.2 M"] and rendered.locator("p code").count() == 1
    assert rendered.locator(".math").all_text_contents() == ["\\(a_1 \\times b_2\\)", "$$\n\\frac{1}{3} \\\\ x_1\n$$"]
    assert rendered.locator("p").first.text_content().endswith("holds.\nIts second line, $1,284.50 paid.")
    assert rendered.locator("ul > li").count() == 2 and rendered.locator("ul ol > li").all_text_contents() == ["nested"]
    tables = rendered.locator("table")
    assert tables.count() == 2
    assert tables.nth(0).locator("td").all_text_contents() == ["north", "1.2"]
    assert tables.nth(1).locator("th[colspan='2']").all_text_contents() == ["values"]
    assert tables.nth(1).locator("td").all_text_contents() == ["a & b", "1", "23"]  # <br> a line break
    assert rendered.locator("pre code").all_text_contents() == ["code <b> stays"]
    with page.expect_download() as download:
        page.click("#save-md")
    assert open(download.value.path(), encoding="utf-8").read() == MARKDOWN + "\n"
