// The answer pane: the text as it streams (the "Text" view, exactly the streamed characters), its Markdown
// rendering, the entries of an answer with boxes (each linked to its box by data-i), and copy / download.

import {clear, el} from "./dom.js";
import {renderMarkdown} from "./markdown.js";

const RENDER_EVERY_MS = 120;  // re-render the Markdown of a streaming answer at most this often

export class AnswerPane {
  constructor(nodes) {
    this.n = nodes;
    this.view = "rendered";
    this.reset();
    nodes.viewRendered.addEventListener("click", () => this.setView("rendered"));
    nodes.viewRaw.addEventListener("click", () => this.setView("raw"));
    nodes.copy.addEventListener("click", () => this.copy());
    nodes.saveMd.addEventListener("click", () => this.download("md"));
    nodes.saveJson.addEventListener("click", () => this.download("json"));
  }

  reset(meta) {
    this.raw = "";
    this.final = null;  // {text, boxes, ...} once finished
    this.meta = meta || {};
    this.items = null;
    clear(this.n.raw);
    clear(this.n.rendered);
    clearTimeout(this.timer);
    this.timer = null;
    this.enableExports(false);
  }

  setView(view) {
    this.view = view;
    this.n.rendered.hidden = view !== "rendered";
    this.n.raw.hidden = view !== "raw";
    this.n.viewRendered.setAttribute("aria-selected", String(view === "rendered"));
    this.n.viewRaw.setAttribute("aria-selected", String(view === "raw"));
  }

  append(delta) {
    const body = this.n.answer;
    const follow = body.scrollTop + body.clientHeight >= body.scrollHeight - 8;
    this.raw += delta;
    this.n.raw.appendChild(document.createTextNode(delta));
    if (this.timer === null) this.timer = setTimeout(() => { this.timer = null; this.renderText(this.raw); },
                                                     RENDER_EVERY_MS);
    if (follow) body.scrollTop = body.scrollHeight;
  }

  renderText(text) {
    clear(this.n.rendered).appendChild(renderMarkdown(text));
  }

  // The finished answer: `result` {text (the model's post-processing of it), boxes, finish_reason, usage, ...}.
  finish(result, entries) {
    clearTimeout(this.timer);
    this.timer = null;
    this.final = result;
    this.items = entries;
    clear(this.n.rendered);
    const boxes = entries && entries.length > 0;
    if (boxes) this.n.rendered.appendChild(this.entryList(entries));
    // the answer's own text too, unless it is only the entries (spotting: texts and coordinates)
    if (!boxes || result.text !== this.raw) this.n.rendered.appendChild(renderMarkdown(result.text));
    this.enableExports(true);
  }

  // A document-pipeline record shown as its blocks (entries) and its JSON as the text.
  showRecord(record, entries, markdown) {
    this.reset({kind: "record"});
    this.raw = JSON.stringify(record, null, 1);
    this.n.raw.appendChild(document.createTextNode(this.raw));
    this.final = {text: markdown, record};
    this.items = entries;
    this.n.rendered.appendChild(this.entryList(entries, true));
    this.enableExports(true);
  }

  entryList(entries, markdown) {
    const list = el("ol", {className: "entries"});
    entries.forEach((entry, i) => {
      const head = el("span", {className: "entry-head"});
      if (entry.number !== undefined && entry.number !== null) head.appendChild(el("b", {}, String(entry.number)));
      if (entry.label) head.appendChild(el("span", {className: "chip"}, entry.label));
      const body = el("div", {className: "entry-text"});
      if (markdown) body.appendChild(renderMarkdown(entry.text));
      else body.appendChild(document.createTextNode(entry.text));
      list.appendChild(el("li", {dataset: {i: String(i)}}, head.childNodes.length ? head : null, body));
    });
    return list;
  }

  enableExports(on) {
    for (const b of [this.n.copy, this.n.saveMd, this.n.saveJson]) b.disabled = !on;
  }

  markdown() {
    if (this.final === null) return this.raw;
    const boxes = this.items && this.items.length > 0;
    if (boxes && this.final.text === this.raw) return this.items.map((e) => e.text).join("\n");
    return this.final.text;
  }

  json() {
    if (this.final && this.final.record) return this.final.record;
    return Object.assign({}, this.meta, {text: this.final ? this.final.text : this.raw, raw: this.raw},
                         this.final ? {boxes: this.final.boxes, finish_reason: this.final.finish_reason,
                                       usage: this.final.usage} : {});
  }

  async copy() {
    const text = this.view === "raw" ? this.raw : this.markdown();
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) {  // no clipboard API (a page not served from localhost or https): copy a selection
      const area = el("textarea", {value: text, className: "offscreen"});
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    this.flash(this.n.copy, "Copied");
  }

  download(kind) {
    const stem = (this.meta.name || "answer").replace(/\.[^.]*$/, "").replace(/[^\w.-]+/g, "_") || "answer";
    const text = kind === "md" ? this.markdown() + "\n" : JSON.stringify(this.json(), null, 1) + "\n";
    const url = URL.createObjectURL(new Blob([text], {type: kind === "md" ? "text/markdown" : "application/json"}));
    const link = el("a", {href: url, download: `${stem}.${kind}`});
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  flash(button, label) {
    const old = button.textContent;
    button.textContent = label;
    setTimeout(() => { button.textContent = old; }, 1200);
  }
}
