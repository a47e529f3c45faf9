"""PP-DocLayoutV2 configuration: the fields of transformers' PPDocLayoutV2Config the built parts read, with the
reference class's defaults (configuration_pp_doclayout_v2.py), and its HGNetV2 backbone config."""

from dataclasses import dataclass, field

from ms_ocr.models.pp_doclayout_v2.backbone import HGNetV2Config
from ms_ocr.models.pp_doclayout_v2.reading_order import ReadingOrderConfig

# the reference's attribute_map: alternative names of two fields
ALIASES = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads"}


@dataclass
class PPDocLayoutV2Config:
    layer_norm_eps: float = 1e-5
    batch_norm_eps: float = 1e-5
    encoder_hidden_dim: int = 256
    encoder_in_channels: list = field(default_factory=lambda: [512, 1024, 2048])
    feat_strides: list = field(default_factory=lambda: [8, 16, 32])
    encoder_layers: int = 1
    encoder_ffn_dim: int = 1024
    encoder_attention_heads: int = 8
    encode_proj_layers: list = field(default_factory=lambda: [2])
    positional_encoding_temperature: int = 10000
    encoder_activation_function: str = "gelu"
    activation_function: str = "silu"
    eval_size: list = None
    normalize_before: bool = False
    hidden_expansion: float = 1.0
    d_model: int = 256
    num_queries: int = 300
    decoder_in_channels: list = field(default_factory=lambda: [256, 256, 256])
    decoder_ffn_dim: int = 1024
    num_feature_levels: int = 3
    decoder_n_points: int = 4
    decoder_layers: int = 6
    decoder_attention_heads: int = 8
    decoder_activation_function: str = "relu"
    learn_initial_query: bool = False
    num_labels: int = 2  # PreTrainedConfig's default; id2label decides
    id2label: dict = None  # {int: name}; LABEL_i when the file has none, as PreTrainedConfig
    class_thresholds: list = None
    class_order: list = None
    backbone: HGNetV2Config = field(default_factory=HGNetV2Config)
    reading_order: ReadingOrderConfig = field(default_factory=ReadingOrderConfig)

    @classmethod
    def from_dict(cls, raw):
        raw = dict(raw)
        for alias, name in ALIASES.items():
            if alias in raw and name not in raw:
                raw[name] = raw.pop(alias)
        if raw.get("id2label"):
            raw["id2label"] = {int(k): str(v) for k, v in raw["id2label"].items()}
            raw["num_labels"] = len(raw["id2label"])
            if sorted(raw["id2label"]) != list(range(raw["num_labels"])):
                raise ValueError("PP-DocLayoutV2 config: id2label keys must be 0..num_labels-1")
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw and k not in ("backbone", "reading_order")}
        cfg = cls(**known, backbone=HGNetV2Config.from_dict(raw.get("backbone_config") or {}),
                  reading_order=ReadingOrderConfig.from_dict(raw.get("reading_order_config") or {}))
        if cfg.id2label is None:
            cfg.id2label = {i: f"LABEL_{i}" for i in range(cfg.num_labels)}
        if cfg.normalize_before:
            raise ValueError("PP-DocLayoutV2 with normalize_before=True is not supported (the checkpoints use False)")
        return cfg
