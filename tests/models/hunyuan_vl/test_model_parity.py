"""Per-component and cached-decode parity of the MindSpore HunyuanOCR against transformers (tiny config)."""

import numpy as np
import pytest
import torch

from ms_ocr.runtime import Prepared
from tests.helpers.parity import rel_err

TOL = 1e-4
# (t, h, w) patch grids: wide, tall, square, and two images in one prompt
GRIDS = [[(1, 4, 10)], [(1, 12, 4)], [(1, 6, 6)], [(1, 4, 6), (1, 8, 4)]]


def _patches(grids, seed):
    n = sum(t * h * w for t, h, w in grids)
    return np.random.default_rng(seed).standard_normal((n, 3 * 16 * 16)).astype(np.float32)


@pytest.mark.parametrize("chunk", [512, 7])  # 7: several query chunks per image, the last one short
@pytest.mark.parametrize("grids", GRIDS, ids=lambda g: "+".join(f"{h}x{w}" for _, h, w in g))
def test_vision_tower_and_merger(grids, chunk, hy_pipeline, hy_reference, monkeypatch):
    rt = hy_pipeline.runtime
    monkeypatch.setattr(rt.vision, "attention_chunk", chunk)
    pix = _patches(grids, len(grids))
    inputs = hy_pipeline.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix})
    tower = np.concatenate([rt.vision.tower(item).asnumpy() for item in inputs])
    with torch.no_grad():
        out = hy_reference.model.vision_tower(torch.tensor(pix), grid_thw=torch.tensor(grids))
    ref_tower = out.last_hidden_state[0].numpy()
    ref_feats = out.pooler_output[0].numpy()
    assert rel_err(tower, ref_tower) < TOL
    feats = rt.encode_images(inputs).asnumpy()
    assert feats.shape == ref_feats.shape == (sum(h // 2 * (w // 2 + 1) + 2 for _, h, w in grids), 64)
    assert rel_err(feats, ref_feats) < TOL


def _prompt(cfg, grids, seed=0):
    rng = np.random.default_rng(seed)
    ids = [cfg.text.bos_token_id] + list(rng.integers(10, 300, 6))
    for _, h, w in grids:
        ids += [cfg.im_start_id] + [cfg.image_token_id] * (h // 2 * (w // 2 + 1) + 2) + [cfg.im_end_id]
        ids += list(rng.integers(10, 300, 3))
    return np.array(ids, np.int64)


def _reference(model, ids, pix, grids, image_token_id):
    tt = torch.tensor(ids)[None]
    mm = (tt == image_token_id).int()
    with torch.no_grad():
        logits = model(input_ids=tt, pixel_values=torch.tensor(pix), image_grid_thw=torch.tensor(grids),
                       mm_token_type_ids=mm).logits[0].numpy()
        pos, delta = model.model.get_rope_index(tt, mm_token_type_ids=mm, image_grid_thw=torch.tensor(grids))
    return logits, pos[:, 0].numpy(), int(delta[0, 0])


def _prepared(pipeline, ids, pos, delta, pix, grids):
    return Prepared(input_ids=ids, position_ids=pos, rope_delta=delta,
                    image_token_mask=ids == pipeline.cfg.image_token_id,
                    vision_inputs=pipeline.vision_inputs({"image_grid_thw": np.array(grids), "pixel_values": pix}))


@pytest.mark.parametrize("chunk", [256, 8])  # 8: several causal query blocks over growing key prefixes
def test_prefill_and_cached_decode_logits(chunk, hy_pipeline, hy_reference):
    """Prefill logits over a two-image prompt (XD-RoPE positions differ per axis there), then 10 cached decode
    steps, each against the reference's full forward; and our cached steps against our own uncached forward."""
    rt = hy_pipeline.runtime
    rt.set_prefill_attention_block(chunk)
    cfg = hy_pipeline.cfg
    grids = [(1, 4, 6), (1, 6, 4)]
    pix = _patches(grids, 7)
    prompt = _prompt(cfg, grids)
    cont = np.random.default_rng(1).integers(10, 350, 10)
    full = np.concatenate([prompt, cont])
    ref_logits, ref_pos, delta = _reference(hy_reference, full, pix, grids, cfg.image_token_id)
    assert (ref_pos[1:] != ref_pos[0]).any()  # the prompt really exercises the multi-axis rope

    s = len(prompt)
    prep = _prepared(hy_pipeline, prompt, ref_pos[:, :s], delta, pix, grids)
    feats = hy_pipeline.encode_images(prep)
    assert rel_err(rt.full_logits(prep, feats), ref_logits[:s]) < TOL

    last = rt.prefill(prep, feats, max_new_tokens=len(cont)).asnumpy()[0]
    assert rel_err(last, ref_logits[s - 1]) < TOL
    for i, tok in enumerate(cont[:-1]):
        step = rt.decode(int(tok), s + i, delta, 4).asnumpy()[0]
        assert rel_err(step, ref_logits[s + i]) < TOL, f"decode step {i}"
        assert np.argmax(step) == np.argmax(ref_logits[s + i])

    ours_uncached = rt.full_logits(_prepared(hy_pipeline, full, ref_pos, delta, pix, grids), feats)
    assert rel_err(ours_uncached, ref_logits) < TOL
    assert rel_err(step, ours_uncached[-2]) < TOL
    rt.set_prefill_attention_block(256)


def test_xdrope_tables_match_reference(hy_pipeline, hy_reference):
    """cos/sin of the NTK-alpha XD-RoPE for 4 distinct position rows (pairs mix axes as the reference's)."""
    from mindspore import Tensor

    pos = np.stack([np.arange(40), np.arange(40) % 7, np.arange(40) // 7, np.arange(40) // 20]).astype(np.int64)
    rotary = hy_reference.model.language_model.rotary_emb
    with torch.no_grad():
        cos_ref, sin_ref = rotary(torch.zeros(1, dtype=torch.float32), torch.tensor(pos)[:, None])
    cos, sin = hy_pipeline.runtime.model.model.rotary(Tensor(pos[:, None].astype(np.int32)))
    assert np.abs(cos.asnumpy()[0, 0] - cos_ref[0].numpy()).max() < 1e-5
    assert np.abs(sin.asnumpy()[0, 0] - sin_ref[0].numpy()).max() < 1e-5
    assert not hy_pipeline.runtime.model.model.rotary.paired
