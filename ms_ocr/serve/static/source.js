// What is being read: an image file (picker, drag and drop, paste) or a page of a PDF, which the server renders
// (POST /v1/pages for the page count, /v1/pages/render for one page as PNG: no PDF code in the page).

import {postBytes} from "./api.js";

function isPdf(file) {
  return file.type === "application/pdf" || /\.pdf$/i.test(file.name || "");
}

export class Source {
  // nodes: {file, drop, pager, page, pages, prev, next, image}; onImage({blob, name, width, height}),
  // onError(error), onBusy(message | null)
  constructor(nodes, handlers) {
    this.n = nodes;
    this.h = handlers;
    this.pdf = null;  // {bytes, name, pages, page}
    this.url = null;
    nodes.file.addEventListener("change", () => {
      if (nodes.file.files.length) this.open(nodes.file.files[0]);
      nodes.file.value = "";  // the same file opened again is a change too
    });
    document.addEventListener("dragover", (event) => {
      event.preventDefault();
      nodes.drop.classList.add("dragging");
    });
    document.addEventListener("dragleave", (event) => {
      if (event.relatedTarget === null) nodes.drop.classList.remove("dragging");
    });
    document.addEventListener("drop", (event) => {
      event.preventDefault();
      nodes.drop.classList.remove("dragging");
      const file = event.dataTransfer && event.dataTransfer.files[0];
      if (file) this.open(file);
    });
    document.addEventListener("paste", (event) => {
      const files = event.clipboardData ? [...event.clipboardData.files] : [];
      const file = files.find((f) => f.type.startsWith("image/") || isPdf(f));
      if (file && !(event.target instanceof HTMLInputElement)) {
        event.preventDefault();
        this.open(file);
      }
    });
    nodes.page.addEventListener("change", () => this.go(parseInt(nodes.page.value, 10)));
    nodes.prev.addEventListener("click", () => this.go(this.pdf.page - 1));
    nodes.next.addEventListener("click", () => this.go(this.pdf.page + 1));
  }

  async open(file) {
    this.h.onError(null);
    if (isPdf(file)) return this.openPdf(file);
    this.pdf = null;
    this.n.pager.hidden = true;
    return this.showImage(file, file.name || "pasted image");
  }

  async openPdf(file) {
    const bytes = await file.arrayBuffer();
    this.h.onBusy("Counting the PDF's pages…");
    try {
      const info = await (await postBytes("/v1/pages", bytes, "application/pdf")).json();
      this.pdf = {bytes, name: file.name || "document.pdf", pages: info.pages, page: 0};
      this.n.page.max = String(info.pages);
      this.n.pages.textContent = `of ${info.pages}`;
      this.n.pager.hidden = false;
      await this.go(1);
    } catch (e) {
      this.h.onError(e);
    } finally {
      this.h.onBusy(null);
    }
  }

  async go(page) {
    const pdf = this.pdf;
    if (pdf === null || !(page >= 1 && page <= pdf.pages)) {
      if (pdf !== null) this.n.page.value = String(pdf.page);
      return;
    }
    this.h.onError(null);
    this.h.onBusy(`Rendering page ${page}…`);
    try {
      const response = await postBytes(`/v1/pages/render?page=${page}`, pdf.bytes, "application/pdf");
      const blob = await response.blob();
      pdf.page = page;
      this.n.page.value = String(page);
      this.n.prev.disabled = page <= 1;
      this.n.next.disabled = page >= pdf.pages;
      await this.showImage(blob, `${pdf.name}, page ${page} of ${pdf.pages}`, page);
    } catch (e) {
      this.h.onError(e);
    } finally {
      this.h.onBusy(null);
    }
  }

  async showImage(blob, name, page) {
    if (this.url !== null) URL.revokeObjectURL(this.url);
    this.url = URL.createObjectURL(blob);
    const img = this.n.image;
    img.src = this.url;
    try {
      await img.decode();
    } catch (e) {
      this.h.onError(new Error(`this browser cannot show ${name} (${blob.type || "unknown type"}): ` +
                               "convert it to PNG or JPEG"));
      return;
    }
    this.h.onImage({blob, name, page: page || null, width: img.naturalWidth, height: img.naturalHeight});
  }
}
