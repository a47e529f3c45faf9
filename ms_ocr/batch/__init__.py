"""Offline batch OCR: inputs (folders, PDFs, manifests), durable results, the batch CLI (ms_ocr.batch.cli)."""
