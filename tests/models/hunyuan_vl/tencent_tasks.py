# The 12 task prompts of HunyuanOCR-1.5 as Tencent's clients send them: TASK_PROMPTS and DEFAULT_TASK of
# Tencent-Hunyuan/HunyuanOCR, inference/utils/tasks.py at commit c55965d3da1e6f41987abec8068f2e70851318bc
# (test data: the strings as that file spells them, its order kept; spotting_json is the concatenation of the
# five string literals it is written as there).

COMMIT = "c55965d3da1e6f41987abec8068f2e70851318bc"
PATH = "inference/utils/tasks.py"
DEFAULT_TASK = "doc_parse"
TASK_PROMPTS = {
    "doc_parse": "提取文档图片中正文的所有信息用markdown格式表示，其中页眉、页脚部分忽略，表格用html格式表达，文档中公式用latex格式表示，按照阅读顺序组织进行解析。",
    "structured_parse": "提取图中的文字。",
    "spotting_json": "检测并识别图中所有的文字行，请按从上到下、从左到右的阅读顺序进行识别。 "
    "输出格式为 JSON 数组，每个元素必须包含："
    '"box": [xmin, ymin, xmax, ymax]（坐标需归一化到 [0, 1000] 范围内）；'
    '"text": "识别出的文字内容"。 '
    "注意：请直接输出 JSON 数组，不要包含任何多余的描述性文字。",
    "spotting_hunyuan": "检测并识别图片中的文字，将文本坐标格式化输出。",
    "layout": "按照阅读顺序解析图中的版式信息。",
    "layout_parse": "提取文档图片中所有内容用markdown格式表示，表格用html格式表达，文档中公式用latex格式表示，请按照阅读顺序组织进行全文解析，并输出版式分析信息。",
    "chart_parse": "解析图中的图表，对于流程图使用Mermaid格式表示，其他图表使用Markdown格式表示。",
    "formula": "识别图片中的公式，用LaTeX格式表示。",
    "table": "把图中的表格解析为HTML。",
    "doc_trans_en2zh": "先解析文档，再将文档内容翻译为中文，其中页眉、页脚忽略，公式用latex格式表示，表格用html格式表示。",
    "trans_other2en": "按照阅读顺序，提取图中文字，公式用latex格式表示，表格用markdown格式表示，再将文字内容翻译为英文。",
    "trans_other2zh": "按照阅读顺序，提取图中文字，公式用latex格式表示，表格用markdown格式表示，再将文字内容翻译为中文。",
}

# Decoding of the same commit's clients (inference/vLLM/infer_vllm_client.py argparse defaults and
# inference/utils/output_utils.py): greedy, repetition_penalty 1.08, an empty system message before the user turn,
# tail-repetition early stop with min_repeats 8 checked from 4,000 characters on, then every 1,000, on the last
# 8,000 characters, units up to 256 characters; clean_repeated_substrings from 2,000 characters, 10 repeats.
REPETITION_PENALTY = 1.08
EARLY_STOP = dict(min_repeats=8, first_check=4000, check_every=1000, window=8000, max_unit=256)
CLEAN_UP_FROM = 2000
