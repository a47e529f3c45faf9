"""HunyuanOCR's declaration (ms_ocr.models.spec.ModelSpec)."""

from ms_ocr.models.spec import ModelSpec

SPEC = ModelSpec(
    name="hunyuan-ocr",
    package="hunyuan_vl",
    title="HunyuanOCR 1B: ViT + perceive merger + HunYuan 0.5B dense decoder with XD-RoPE",
    aliases=("hunyuanocr", "hunyuan_vl"),
    hub_id="tencent/HunyuanOCR",
    hub_subfolder="v1.0",  # the repository's root holds HunyuanOCR-1.5
    # the prompts HunyuanOCR's README recommends (its Chinese prompts, as Tencent's scripts send them)
    tasks={
        "ocr": "提取图中的文字。",
        "spotting": "检测并识别图片中的文字，将文本坐标格式化输出。",
        "parse": "提取文档图片中正文的所有信息用markdown格式表示，其中页眉、页脚部分忽略，表格用html格式表达，"
                 "文档中公式用latex格式表示，按照阅读顺序组织进行解析。",
        "formula": "识别图片中的公式，用LaTeX格式表示。",
        "table": "把图中的表格解析为HTML。",
        "chart": "解析图中的图表，对于流程图使用Mermaid格式表示，其他图表使用Markdown格式表示。",
        "subtitles": "提取图片中的字幕。",
        "translate": "先提取文字，再将文字内容翻译为英文。"
                     "若是文档，则其中页眉、页脚忽略。公式用latex格式表示，表格用html格式表示。",
    },
    box_tasks=("spotting",),
    region_tasks={"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"},
    config="config:HunyuanOCRConfig",
    processor="processor:HunyuanOCRProcessor",
    model="model:HunyuanOCRModel",
    postprocess="host:postprocess",
)
