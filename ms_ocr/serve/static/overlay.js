// Boxes over the image: one SVG in the image's own pixel coordinates (viewBox = the image size the boxes are in),
// stretched over the displayed image, so boxes stay in place at any zoom. An item is a box [x1, y1, x2, y2] or a
// polygon (`points`), with an optional reading-order number drawn at its corner. Hovering a box highlights its
// entry in the answer, and back (linkHover).

import {clear, svg} from "./dom.js";

// ms_ocr/processing/boxes.py's palette: the PNG drawings of the command lines and the page agree
const PALETTE = ["#e6194b", "#3cb44b", "#0082c8", "#f58230", "#911eb4", "#46f0f0", "#f032e6", "#808000",
                 "#008080", "#aa6e28"];

function colorOf(key) {
  if (typeof key === "number") return PALETTE[key % PALETTE.length];
  let h = 0;
  for (const ch of String(key)) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
}

function finite(values) {
  return Array.isArray(values) && values.every((v) => typeof v === "number" && Number.isFinite(v));
}

// items: [{box, points?, number?, color?}] in pixels of a width x height image; returns how many were drawn.
export function drawItems(node, items, width, height) {
  clear(node);
  node.setAttribute("viewBox", `0 0 ${width} ${height}`);
  node.setAttribute("preserveAspectRatio", "none");
  const font = Math.max(10, Math.max(width, height) / 60);
  let drawn = 0;
  items.forEach((item, i) => {
    const points = Array.isArray(item.points) && item.points.length >= 3 && item.points.every(finite)
      ? item.points : null;
    if (points === null && !(finite(item.box) && item.box.length === 4)) return;
    const color = colorOf(item.color !== undefined ? item.color : i);
    const group = svg("g", {class: "item", "data-i": i});
    let x, y;
    if (points !== null) {
      group.appendChild(svg("polygon", {points: points.map((p) => `${p[0]},${p[1]}`).join(" "), stroke: color,
                                        fill: color}));
      x = Math.min(...points.map((p) => p[0]));
      y = Math.min(...points.map((p) => p[1]));
    } else {
      const [x1, y1, x2, y2] = item.box;
      x = Math.min(x1, x2);
      y = Math.min(y1, y2);
      group.appendChild(svg("rect", {x, y, width: Math.abs(x2 - x1), height: Math.abs(y2 - y1), stroke: color,
                                     fill: color}));
    }
    if (item.number !== undefined && item.number !== null) {
      const label = String(item.number);
      const w = font * (0.7 + 0.62 * label.length), h = font * 1.3;
      group.appendChild(svg("rect", {class: "badge", x, y, width: w, height: h, fill: color}));
      group.appendChild(svg("text", {x: x + w / 2, y: y + h * 0.74, "font-size": font, "text-anchor": "middle"},
                            label));
    }
    node.appendChild(group);
    drawn++;
  });
  return drawn;
}

export function clearItems(node) {
  clear(node);
}

// Hovering an item (a box in `overlay`, an entry with data-i in `list`) highlights both.
export function linkHover(overlay, list) {
  const set = (i, on, from) => {
    for (const node of [overlay, list]) {
      for (const hit of node.querySelectorAll(`[data-i="${i}"]`)) {
        hit.classList.toggle("hot", on);
        if (on && node !== from && node === list) hit.scrollIntoView({block: "nearest"});
      }
    }
  };
  for (const node of [overlay, list]) {
    node.addEventListener("mouseover", (event) => {
      const hit = event.target.closest("[data-i]");
      if (hit && node.contains(hit)) set(hit.dataset.i, true, node);
    });
    node.addEventListener("mouseout", (event) => {
      const hit = event.target.closest("[data-i]");
      if (hit && node.contains(hit) && !hit.contains(event.relatedTarget)) set(hit.dataset.i, false, node);
    });
  }
}
