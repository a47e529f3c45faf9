"""Training code kept out of the ms_ocr package (it needs torch): the demo model (training/demo)."""
