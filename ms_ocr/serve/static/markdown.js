// A small Markdown renderer for model answers, building DOM nodes only (no HTML string is ever parsed): headings,
// paragraphs (their line breaks kept: an OCR answer's lines are the page's), fenced code, TeX display blocks,
// block quotes, lists, rules, pipe tables and HTML tables (tables.js). Raw HTML other than tables stays text.

import {el} from "./dom.js";
import {renderInline} from "./inline.js";
import {htmlTable, isPipeSeparator, pipeTable} from "./tables.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])(\s+|$)/;
const MATH = /^\s*(\$\$|\\\[)/;
const TABLE = /^\s*<table\b/i;

// The Markdown `text` as a DocumentFragment.
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  blocks(text.replace(/\r\n?/g, "\n").split("\n"), out);
  return out;
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    MATH.test(line) || TABLE.test(line) ||
    (line.includes("|") && i + 1 < lines.length && isPipeSeparator(lines[i + 1]));
}

function blocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const fence = m[1], body = [];
      for (i++; i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length)) &&
        !lines[i].trim().replace(new RegExp("^\\" + fence[0] + "+"), "").trim()); i++) body.push(lines[i]);
      i++;
      parent.appendChild(el("pre", {}, el("code", {}, body.join("\n"))));
    } else if ((m = MATH.exec(line))) {
      const close = m[1] === "$$" ? "$$" : "\\]", body = [line];
      const rest = line.slice(line.indexOf(m[1]) + m[1].length);
      if (!rest.includes(close)) {
        for (i++; i < lines.length; i++) {
          body.push(lines[i]);
          if (lines[i].includes(close)) break;
        }
      }
      i++;
      parent.appendChild(el("pre", {className: "math"}, body.join("\n")));
    } else if ((m = HEADING.exec(line))) {
      parent.appendChild(renderInline(m[2] || "", el("h" + m[1].length)));
      i++;
    } else if (RULE.test(line)) {
      parent.appendChild(el("hr"));
      i++;
    } else if (TABLE.test(line)) {
      const body = [];
      let depth = 0;
      for (; i < lines.length; i++) {
        body.push(lines[i]);
        depth += (lines[i].match(/<table\b/gi) || []).length - (lines[i].match(/<\/table\s*>/gi) || []).length;
        if (depth <= 0) break;
      }
      i++;
      const source = body.join("\n");
      parent.appendChild(htmlTable(source) || renderInline(source, el("p")));
    } else if (line.includes("|") && i + 1 < lines.length && isPipeSeparator(lines[i + 1])) {
      const rows = [];
      let j = i + 2;
      for (; j < lines.length && lines[j].trim() && lines[j].includes("|"); j++) rows.push(lines[j]);
      parent.appendChild(pipeTable(line, lines[i + 1], rows));
      i = j;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && lines[i].trim() && (QUOTE.test(lines[i]) || !startsBlock(lines, i)); i++) {
        body.push(lines[i].replace(QUOTE, ""));
      }
      const quote = el("blockquote");
      blocks(body, quote);
      parent.appendChild(quote);
    } else if ((m = ITEM.exec(line))) {
      i = list(lines, i, parent);
    } else {
      const body = [line];
      for (i++; i < lines.length && lines[i].trim() && !startsBlock(lines, i); i++) body.push(lines[i]);
      parent.appendChild(renderInline(body.join("\n"), el("p")));
    }
  }
}

// A list starting at lines[i]: its items (further items of the same kind at the same indent; a line indented
// past the marker, or a lazy continuation, belongs to the item above); returns the index after it.
function list(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length, ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const items = [];
  let blank = false;
  for (; i < lines.length; i++) {
    const line = lines[i], m = ITEM.exec(line), item = items[items.length - 1];
    if (m && m[1].length <= indent + 1 && /\d/.test(m[2]) === ordered) {
      items.push({lines: [line.slice(m[0].length)], width: m[0].length});
      blank = false;
    } else if (!line.trim()) {
      blank = true;
      item.lines.push("");
    } else if (line.search(/\S/) >= item.width || (!blank && !startsBlock(lines, i))) {
      item.lines.push(line.search(/\S/) >= item.width ? line.slice(item.width) : line.trim());
      blank = false;
    } else {
      break;
    }
  }
  for (const {lines: body} of items) {
    while (body.length && !body[body.length - 1].trim()) body.pop();
    const li = el("li");
    if (body.slice(1).every((l, k) => l.trim() && !startsBlock(body, k + 1))) {
      renderInline(body.join("\n"), li);  // a tight item: its text without a paragraph
    } else {
      blocks(body, li);
    }
    node.appendChild(li);
  }
  parent.appendChild(node);
  return i;
}
