"""What a PP-DocLayout version is to the loader and the runner: one LayoutSpec per package."""

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class LayoutSpec:
    model_type: str          # config.json's model_type
    name: str                # for messages
    config: type             # a LayoutConfig subclass: .from_dict(raw)
    model: type              # its Cell: Model(cfg); .host_inputs(h, w) -> the graph's extra inputs
    name_table: Callable     # cfg -> RenameTable (checkpoint names -> Cell names)
    outputs: tuple           # the graph's outputs, in order (the reference's names)
    pixel_path: str          # processor.PIXEL_PATHS: how the reference resizes and scales
    detections: Callable     # (outputs tuple, target_sizes [(h, w)], threshold, pcfg) -> list of dict per image
