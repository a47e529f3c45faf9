// A document-pipeline result (python -m ms_ocr.pipeline: NAME.json, one page's record or a PDF's {"pages": [...]})
// as items to draw: its blocks in reading order, each with its box, its polygon or quadrilateral when the layout
// model gave one (`points`), its reading number (`order`; unnumbered blocks have none), label and content.
// A pipeline endpoint of the server answers the same record (docs/serving.md, "The page").

// The pages of a record: [{width, height, blocks}], or an error message.
export function recordPages(record) {
  if (record === null || typeof record !== "object") return "the file is not a JSON object";
  const pages = Array.isArray(record.pages) ? record.pages : [record];
  const out = [];
  for (const page of pages) {
    if (page === null || typeof page !== "object") continue;
    const blocks = Array.isArray(page.blocks) ? page.blocks : Array.isArray(page.layout) ? page.layout : null;
    if (blocks === null) continue;
    out.push({width: page.width, height: page.height, page: page.page, blocks});
  }
  return out.length ? out : "the file holds no page with \"blocks\" (a document pipeline result NAME.json)";
}

function orderKey(block) {
  return typeof block.order === "number" ? block.order : Infinity;
}

// {items, width, height}: the page's blocks in reading order (numbered ones first, by `order`), as overlay items
// and answer entries ({box, points, number, color, label, text}).
export function layoutItems(page, fallbackWidth, fallbackHeight) {
  const blocks = page.blocks.filter((b) => b !== null && typeof b === "object")
    .map((b, i) => ({b, i}))
    .sort((p, q) => orderKey(p.b) - orderKey(q.b) || p.i - q.i)
    .map((p) => p.b);
  const items = blocks.map((b) => ({
    box: b.box,
    points: b.points,
    number: typeof b.order === "number" ? b.order : null,
    color: typeof b.label === "string" ? b.label : "",
    label: typeof b.label === "string" ? b.label : "",
    text: typeof b.content === "string" ? b.content : "",
  }));
  const size = (v, fallback) => (typeof v === "number" && v > 0 ? v : fallback);
  return {items, width: size(page.width, fallbackWidth), height: size(page.height, fallbackHeight)};
}

// The page's Markdown: its blocks' contents in reading order (what the pipeline's NAME.md holds, roughly: the
// pipeline's own Markdown also formats titles, formulas and pictures).
export function layoutMarkdown(items) {
  return items.filter((it) => it.text.trim()).map((it) => it.text.trim()).join("\n\n");
}
