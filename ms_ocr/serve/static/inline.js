// Markdown spans (CommonMark's common subset: code, emphasis, strong, strikethrough, links, images; TeX spans kept
// as written) as DOM nodes.
// Raw HTML is not interpreted: a tag in the text stays text. Links only to http(s) and mailto; images become
// their alt text (the page loads nothing but the server's files).

import {el} from "./dom.js";

const RULES = [
  // TeX first, kept whole as the model wrote it (a Markdown escape or emphasis must not eat its \\ or _)
  ["math", /\\\((.+?)\\\)|\$(?=\S)([^$\n]*?\S)\$(?!\d)/g],
  ["code", /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g],
  ["escape", /\\([`*_#|~<>$])/g],
  ["image", /!\[([^\]\n]*)\]\(\s*([^)\s]*)(?:\s+"[^"\n]*")?\s*\)/g],
  ["link", /\[([^\]\n]+)\]\(\s*([^)\s]+)(?:\s+"[^"\n]*")?\s*\)/g],
  ["strong", /\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__(?!\w)/g],
  ["em", /\*(?=[^\s*])([\s\S]*?[^\s*])\*(?!\*)|(?<![\w\\])_(?=[^\s_])([\s\S]*?[^\s_])_(?!\w)/g],
  ["del", /~~(?=\S)([\s\S]*?\S)~~/g],
];

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

// Append the spans of `text` to `parent`.
export function renderInline(text, parent) {
  const next = RULES.map(() => null);  // each rule's next match at or after `pos` (reused until passed)
  let pos = 0;
  while (pos < text.length) {
    let best = -1;
    for (let r = 0; r < RULES.length; r++) {
      if (next[r] === null || (next[r] !== false && next[r].index < pos)) {
        const re = RULES[r][1];
        re.lastIndex = pos;
        next[r] = re.exec(text) || false;
      }
      if (next[r] && (best < 0 || next[r].index < next[best].index)) best = r;
    }
    if (best < 0) break;
    const m = next[best];
    if (m.index > pos) parent.appendChild(document.createTextNode(text.slice(pos, m.index)));
    parent.appendChild(span(RULES[best][0], m));
    pos = m.index + m[0].length;
  }
  if (pos < text.length) parent.appendChild(document.createTextNode(text.slice(pos)));
  return parent;
}

function span(kind, m) {
  switch (kind) {
    case "math":
      return el("span", {className: "math"}, m[0]);
    case "escape":
      return document.createTextNode(m[1]);
    case "code":
      return el("code", {}, m[2].length > 2 && m[2].startsWith(" ") && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2]);
    case "image":
      return el("span", {className: "image-alt", title: m[2]}, "[image" + (m[1] ? ": " + m[1] : "") + "]");
    case "link":
      if (!SAFE_URL.test(m[2])) return renderInline(m[1], el("span"));
      return renderInline(m[1], el("a", {href: m[2], rel: "noopener noreferrer", target: "_blank"}));
    case "strong":
      return renderInline(m[1] !== undefined ? m[1] : m[2], el("strong"));
    case "em":
      return renderInline(m[1] !== undefined ? m[1] : m[2], el("em"));
    default:
      return renderInline(m[1], el("del"));
  }
}
