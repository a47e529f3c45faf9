// DOM building without HTML parsing: every string becomes a text node (or an attribute value), never markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// el("a", {href: url, className: "x"}, "text", otherNode): an HTML element; props are set as properties.
export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "dataset") Object.assign(node.dataset, value);
    else node[name] = value;
  }
  return append(node, children);
}

// svg("rect", {x: 1, "data-i": 0}): an SVG element; attrs are set as attributes.
export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  return append(node, children);
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function show(node, visible) {
  node.hidden = !visible;
}
