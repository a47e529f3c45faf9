"""HunyuanOCR 1.0 and HunyuanOCR-1.5 told apart from their files, each with its own prompts and decoding defaults,
checked against the strings and numbers of Tencent's 1.5 clients (tencent_tasks.py: path and commit)."""

import json
import os
import shutil

import pytest

from ms_ocr import models
from ms_ocr.config_utils import CheckpointError
from ms_ocr.models.hunyuan_vl.version import recognise
from ms_ocr.stop_rules import TailRepetition
from tests.cli_util import ROOT, assert_one_line_error, run_module
from tests.models.hunyuan_vl import tencent_tasks as T

SPEC = models.get("hunyuan-ocr")
SPEC_1_5 = dict(SPEC.all_versions())["1.5"]


def _edit(folder, name, change):
    path = os.path.join(folder, name)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    change(data)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def test_the_twelve_prompts_are_tencents_byte_for_byte():
    assert list(SPEC_1_5.tasks) == list(T.TASK_PROMPTS)  # doc_parse first: the default task
    assert next(iter(SPEC_1_5.tasks)) == T.DEFAULT_TASK
    for task, prompt in T.TASK_PROMPTS.items():
        assert SPEC_1_5.tasks[task].encode("utf-8") == prompt.encode("utf-8"), task
    # spotting_hunyuan is 1.0's spotting prompt, structured_parse 1.0's ocr prompt
    assert SPEC_1_5.tasks["spotting_hunyuan"] == SPEC.tasks["spotting"]
    assert SPEC_1_5.tasks["structured_parse"] == SPEC.tasks["ocr"]


def test_decoding_defaults_per_version():
    assert SPEC_1_5.repetition_penalty == T.REPETITION_PENALTY
    assert SPEC_1_5.stop_rules == (TailRepetition(**T.EARLY_STOP),)
    assert SPEC_1_5.postprocess_options == {"clean_up_from": T.CLEAN_UP_FROM, "normalize_doc_parse": True}
    assert SPEC_1_5.hub_subfolder is None and SPEC_1_5.box_tasks == ("spotting_json", "spotting_hunyuan")
    # 1.0 unchanged: no penalty, no stop rule, the 8,000-character clean-up, its own eight tasks
    assert (SPEC.version, SPEC.repetition_penalty, SPEC.stop_rules) == ("1.0", 1.0, ())
    assert SPEC.postprocess_options == {"clean_up_from": 8000}
    assert list(SPEC.tasks) == ["ocr", "spotting", "parse", "formula", "table", "chart", "subtitles", "translate"]


def test_model_sampling_takes_the_versions_defaults_unless_given():
    from ms_ocr.generate import model_sampling
    s15 = model_sampling(SPEC_1_5, None)
    assert s15.repetition_penalty == 1.08 and s15.stop_rules == SPEC_1_5.stop_rules and s15.temperature == 0
    assert model_sampling(SPEC_1_5, None, repetition_penalty=1.0).repetition_penalty == 1.0
    assert model_sampling(SPEC_1_5, None, early_stop=False).stop_rules == ()
    s10 = model_sampling(SPEC, None)
    assert (s10.repetition_penalty, s10.stop_rules) == (1.0, ())


def test_versions_are_recognised_from_the_files(hunyuan_checkpoint, hy15_dir, tmp_path):
    hub = hunyuan_checkpoint("hub")  # v1.0's flat file
    saved = hunyuan_checkpoint()  # a transformers save of a 1.0 model (vision max_vit_seq_len 16,384)
    assert recognise(hub) == recognise(saved) == "1.0"
    assert recognise(hy15_dir) == "1.5"
    assert SPEC.for_checkpoint(hub) is SPEC
    assert SPEC.for_checkpoint(hy15_dir).tasks == T.TASK_PROMPTS
    # the hub repository's root: 1.5 with the archived 1.0 in v1.0/
    root = _copy(hy15_dir, tmp_path / "root")
    shutil.copytree(hub, os.path.join(root, "v1.0"))
    assert recognise(root) == "1.5" and recognise(os.path.join(root, "v1.0")) == "1.0"
    # a transformers save of 1.5 keeps its max_vit_seq_len: still 1.5
    nested = _copy(hy15_dir, tmp_path / "nested")
    _edit(nested, "config.json",
          lambda c: [c.pop(k) for k in list(c) if k in c["text_config"] and k != "model_type"])
    assert recognise(nested) == "1.5"


@pytest.mark.parametrize("case", ["flat_with_1_5_seq_len", "unknown_seq_len", "1_0_files_in_a_1_5_root"])
def test_a_folder_that_cannot_be_told_apart_is_refused(case, hunyuan_checkpoint, hy15_dir, tmp_path):
    if case == "flat_with_1_5_seq_len":
        folder = _copy(hunyuan_checkpoint("hub"), tmp_path / case)
        _edit(folder, "config.json", lambda c: c["vision_config"].update(max_vit_seq_len=65536))
    elif case == "unknown_seq_len":
        folder = _copy(hy15_dir, tmp_path / case)
        _edit(folder, "config.json", lambda c: c["vision_config"].update(max_vit_seq_len=32768))
    else:
        folder = _copy(hunyuan_checkpoint(), tmp_path / case)
        shutil.copytree(hunyuan_checkpoint("hub"), os.path.join(folder, "v1.0"))
    with pytest.raises(CheckpointError) as err:
        recognise(folder)
    message = str(err.value)
    assert "\n" not in message and "HunyuanOCR 1.0" in message and "HunyuanOCR-1.5" in message
    page = os.path.join(ROOT, "examples", "note.png")
    proc = run_module("ms_ocr.infer", "--model", "hunyuan-ocr", "--model-path", folder, "--image", page)
    assert_one_line_error(proc, "cannot tell which HunyuanOCR", "HunyuanOCR 1.0", "HunyuanOCR-1.5")


def test_the_system_turn_in_the_rendered_prompt(hunyuan_checkpoint, hy15_dir):
    """An empty system message (<｜hy_place▁holder▁no▁3｜> after BOS) for 1.5, as Tencent's 1.5 clients send it, and
    for 1.0's flat file; none for a transformers save of 1.0."""
    from tests.helpers.tiny_hunyuan import BOS, IDS
    system = IDS["<｜hy_place▁holder▁no▁3｜>"]

    def first_ids(folder):
        host = SPEC.host_side(folder)
        return [int(t) for t in host["processor"]([], T.TASK_PROMPTS["doc_parse"])["input_ids"][:2]]

    assert first_ids(hy15_dir) == [BOS, system]
    assert first_ids(hunyuan_checkpoint("hub")) == [BOS, system]
    assert first_ids(hunyuan_checkpoint())[1] != system
    rendered = SPEC.host_side(hy15_dir)["processor"].render_prompt(T.TASK_PROMPTS["table"], 1)
    assert rendered.startswith("<｜hy_begin▁of▁sentence｜><｜hy_place▁holder▁no▁3｜>")
    assert rendered.endswith(T.TASK_PROMPTS["table"] + "<｜hy_User｜>")


def test_help_lists_both_versions_tasks():
    text = models.tasks_help()
    assert "hunyuan-ocr: ocr, spotting, parse, formula, table, chart, subtitles, translate (1.0)" in text
    assert "hunyuan-ocr 1.5: " + ", ".join(T.TASK_PROMPTS) in text
