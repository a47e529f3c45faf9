"""One parsed page: its blocks, what the layout model found, the pictures, the timings; as Markdown, as the page's JSON
record and as a drawing of the numbered blocks (outlines where the layout model gives them)."""

import os
from dataclasses import dataclass, field

from ms_ocr.pipeline.markdown import IGNORED_LABELS, page_markdown


@dataclass
class PageResult:
    width: int
    height: int
    blocks: list  # markdown.Block, in reading order
    layout: list = field(default_factory=list)  # the layout model's blocks as its post-processing gave them
    pictures: dict = field(default_factory=dict)  # relative path -> PIL crop of blocks kept as pictures
    timings: dict = field(default_factory=dict)
    ignore: tuple = IGNORED_LABELS
    version: str = None  # the pipeline version that parsed the page
    warp: dict = None  # PP-DocLayoutV4's page geometry (roll, quadrant_confidence, shear, kx, ky), as predicted
    charts: bool = False

    def markdown(self):
        return page_markdown(self.blocks, self.width, self.ignore, self.charts)

    def as_dict(self):
        """The page's JSON record: "blocks" are the pipeline's (filtered, merged, recognised), "layout" the layout
        model's detections as its reference post-processing returns them (label, score, box, order, points)."""
        out = {"width": self.width, "height": self.height, "pipeline_version": self.version,
               "blocks": [b.as_dict() for b in self.blocks], "layout": [b.as_dict() for b in self.layout]}
        if self.warp is not None:
            out["warp"] = {k: round(float(v), 6) for k, v in self.warp.items()}
        out["timings"] = self.timings
        return out

    def draw(self, page):
        """The page with every block outlined (its polygon or quadrilateral when it has one, else its box) and its
        reading number (or label) written on it."""
        from ms_ocr.processing.boxes import draw_boxes
        items = [{"box": b.box, "points": b.points, "text": f"{b.order} {b.label}" if b.order else b.label}
                 for b in self.blocks]
        return draw_boxes(page, items)

    def save_pictures(self, folder):
        for rel, img in self.pictures.items():
            path = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            img.convert("RGB").save(path, quality=95)
