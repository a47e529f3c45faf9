"""HunyuanOCR's declaration (ms_ocr.models.spec.ModelSpec): 1.0 and HunyuanOCR-1.5, told apart by version.py.

1.5's tasks, prompts and decoding are those of Tencent's own 1.5 clients, Tencent-Hunyuan/HunyuanOCR at commit
c55965d3: inference/utils/tasks.py (the 12 prompts, doc_parse the default), inference/vLLM/infer_vllm_client.py and
inference/transformers/infer_hf_8gpu.py (an empty system message, greedy, repetition_penalty 1.08, the tail-repetition
early stop), inference/utils/output_utils.py (the repeated-substring clean-up from 2,000 characters, the stop's
thresholds, the doc_parse markdown normalisation)."""

from ms_ocr.models.spec import ModelSpec
from ms_ocr.stop_rules import TailRepetition

# 1.0: the prompts HunyuanOCR's README recommends (its Chinese prompts, as Tencent's scripts send them)
TASKS_1_0 = {
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
}

# 1.5: Tencent's fixed task prompts (tasks.py TASK_PROMPTS, in its order; doc_parse is DEFAULT_TASK). Tencent exposes
# no free prompt: hand-edited instructions were seen to degrade quality silently.
TASKS_1_5 = {
    "doc_parse": "提取文档图片中正文的所有信息用markdown格式表示，其中页眉、页脚部分忽略，表格用html格式表达，"
                 "文档中公式用latex格式表示，按照阅读顺序组织进行解析。",
    "structured_parse": "提取图中的文字。",
    "spotting_json": "检测并识别图中所有的文字行，请按从上到下、从左到右的阅读顺序进行识别。 "
                     "输出格式为 JSON 数组，每个元素必须包含："
                     "\"box\": [xmin, ymin, xmax, ymax]（坐标需归一化到 [0, 1000] 范围内）；"
                     "\"text\": \"识别出的文字内容\"。 "
                     "注意：请直接输出 JSON 数组，不要包含任何多余的描述性文字。",
    "spotting_hunyuan": "检测并识别图片中的文字，将文本坐标格式化输出。",
    "layout": "按照阅读顺序解析图中的版式信息。",
    "layout_parse": "提取文档图片中所有内容用markdown格式表示，表格用html格式表达，文档中公式用latex格式表示，"
                    "请按照阅读顺序组织进行全文解析，并输出版式分析信息。",
    "chart_parse": "解析图中的图表，对于流程图使用Mermaid格式表示，其他图表使用Markdown格式表示。",
    "formula": "识别图片中的公式，用LaTeX格式表示。",
    "table": "把图中的表格解析为HTML。",
    "doc_trans_en2zh": "先解析文档，再将文档内容翻译为中文，其中页眉、页脚忽略，公式用latex格式表示，表格用html格式表示。",
    "trans_other2en": "按照阅读顺序，提取图中文字，公式用latex格式表示，表格用markdown格式表示，再将文字内容翻译为英文。",
    "trans_other2zh": "按照阅读顺序，提取图中文字，公式用latex格式表示，表格用markdown格式表示，再将文字内容翻译为中文。",
}

SPEC = ModelSpec(
    name="hunyuan-ocr",
    package="hunyuan_vl",
    title="HunyuanOCR 1B: ViT + perceive merger + HunYuan 0.5B dense decoder with XD-RoPE",
    aliases=("hunyuanocr", "hunyuan_vl"),
    hub_id="tencent/HunyuanOCR",
    hub_subfolder="v1.0",  # the repository's root holds HunyuanOCR-1.5
    tasks=TASKS_1_0,
    box_tasks=("spotting",),
    region_tasks={"text": "ocr", "table": "table", "formula": "formula", "chart": "chart"},
    # greedy without a penalty, as Tencent's 1.0 vLLM recipe; the 1.0 scripts' clean-up starts at 8,000 characters
    postprocess_options={"clean_up_from": 8000},
    config="config:HunyuanOCRConfig",
    processor="processor:HunyuanOCRProcessor",
    model="model:HunyuanOCRModel",
    postprocess="host:postprocess",
    version="1.0",
    recognise="version:recognise",
    versions={"1.5": dict(
        hub_subfolder=None,
        tasks=TASKS_1_5,
        box_tasks=("spotting_json", "spotting_hunyuan"),
        # structured_parse is 1.0's ocr prompt, chart_parse 1.0's chart prompt
        region_tasks={"text": "structured_parse", "table": "table", "formula": "formula", "chart": "chart_parse"},
        repetition_penalty=1.08,
        stop_rules=(TailRepetition(min_repeats=8, first_check=4000, check_every=1000, window=8000, max_unit=256),),
        postprocess_options={"clean_up_from": 2000, "normalize_doc_parse": True},
    )},
)
