// Tables in an answer: HTML tables (the table and document-parsing tasks write them) rebuilt element by element
// from their table tags alone — the browser's HTML parser never sees the text; a cell's text is inserted as text,
// any other tag in it stays visible as text — and Markdown pipe tables.

import {el} from "./dom.js";
import {renderInline} from "./inline.js";

const TAG = /<(\/?)(table|thead|tbody|tfoot|tr|td|th|br)\b([^<>]*)>/gi;
const SPAN = /\b(colspan|rowspan)\s*=\s*["']?(\d{1,4})/gi;
const ENTITIES = {amp: "&", lt: "<", gt: ">", quot: "\"", apos: "'", nbsp: "\u00a0"};

function decode(text) {
  return text.replace(/&(#x[0-9a-f]{1,6}|#\d{1,7}|[a-z]+);/gi, (whole, name) => {
    if (name[0] === "#") {
      const code = name[1] === "x" || name[1] === "X" ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
      return code > 0 && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff) ? String.fromCodePoint(code) : whole;
    }
    const known = ENTITIES[name.toLowerCase()];
    return known === undefined ? whole : known;
  });
}

// The HTML table `source` (from <table to its </table>) as a <table> element, or null when it has no cell.
export function htmlTable(source) {
  const root = el("div", {className: "table-wrap"});
  const stack = [];  // open table-level elements, innermost last
  let cell = null, cells = 0, pos = 0;
  const top = (tag) => {
    for (let i = stack.length - 1; i >= 0; i--) if (stack[i].localName === tag) return stack[i];
    return null;
  };
  const text = (chunk) => {
    if (cell !== null) cell.appendChild(document.createTextNode(decode(chunk)));
    else if (chunk.trim()) root.appendChild(el("p", {}, decode(chunk)));  // stray text between rows
  };
  TAG.lastIndex = 0;
  for (let m; (m = TAG.exec(source)) !== null;) {
    text(source.slice(pos, m.index));
    pos = TAG.lastIndex;
    const closing = m[1] === "/", tag = m[2].toLowerCase();
    if (tag === "br") {
      if (cell !== null) cell.appendChild(el("br"));
      continue;
    }
    if (closing) {
      if (tag === "td" || tag === "th") cell = null;
      else {
        const open = top(tag);
        if (open !== null) {
          stack.length = stack.indexOf(open);
          cell = null;
        }
      }
      continue;
    }
    if (tag === "table") {
      const table = el("table");
      (cell || root).appendChild(table);
      stack.push(table);
      cell = null;
      continue;
    }
    const table = top("table");
    if (table === null) continue;
    if (tag === "tr") {
      let section = table;  // the innermost of the table and its thead / tbody / tfoot
      for (let i = stack.length - 1; stack[i] !== table; i--) {
        if (stack[i].localName !== "tr") {
          section = stack[i];
          break;
        }
      }
      while (stack[stack.length - 1] !== section) stack.pop();
      const row = el("tr");
      section.appendChild(row);
      stack.push(row);
      cell = null;
    } else if (tag === "td" || tag === "th") {
      let row = top("tr");
      if (row === null || stack.indexOf(row) < stack.indexOf(table)) {
        row = el("tr");
        table.appendChild(row);
        stack.push(row);
      }
      cell = el(tag);
      for (let s; (s = SPAN.exec(m[3])) !== null;) cell[s[1].toLowerCase() === "colspan" ? "colSpan" : "rowSpan"] =
        Math.min(Math.max(parseInt(s[2], 10), 1), 100);
      SPAN.lastIndex = 0;
      row.appendChild(cell);
      cells++;
    } else {  // thead, tbody, tfoot
      while (stack[stack.length - 1] !== table) stack.pop();
      const section = el(tag);
      table.appendChild(section);
      stack.push(section);
      cell = null;
    }
  }
  text(source.slice(pos));
  return cells > 0 ? root : null;
}

// Markdown pipe tables ------------------------------------------------------------------------------------------

export function isPipeSeparator(line) {
  return line.includes("|") && /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(line);
}

function cellsOf(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const out = [];
  let cur = "";
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "\\" && s[i + 1] === "|") {
      cur += "|";
      i++;
    } else if (s[i] === "|") {
      out.push(cur);
      cur = "";
    } else {
      cur += s[i];
    }
  }
  out.push(cur);
  return out.map((c) => c.trim());
}

// A pipe table of a header line, a separator line and body lines.
export function pipeTable(header, separator, rows) {
  const align = cellsOf(separator).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center"
    : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : ""));
  const row = (line, tag) => {
    const tr = el("tr");
    cellsOf(line).forEach((text, i) => {
      const cell = renderInline(text, el(tag));
      if (align[i]) cell.style.textAlign = align[i];
      tr.appendChild(cell);
    });
    return tr;
  };
  return el("div", {className: "table-wrap"}, el("table", {}, el("thead", {}, row(header, "th")),
    el("tbody", {}, ...rows.map((line) => row(line, "td")))));
}
