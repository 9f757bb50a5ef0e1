"""End to end: a BERT-style encoder (issue 3, point 4) compiled for every target that runs here
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.builders import bert_encoder
from tests.e2e.models import compile_and_run, onnxruntime_outputs

pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (pip install onnxruntime)")


def _inputs(seq, vocab, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    ids[0, :2] = [0, vocab - 1]  # the first and last embedding rows
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4:] = 0  # padded tail: those keys get the -1e9 bias
    return {"input_ids": ids, "attention_mask": mask}


def test_bert_encoder_seq128_two_layers_matches_onnxruntime(target):
    model = bert_encoder(seed=3, seq=128, hidden=256, heads=4, layers=2, vocab=1000)
    feeds = _inputs(128, 1000)
    got = compile_and_run(model, feeds, opt_level=3, target=target.target)["last_hidden_state"]
    ref = onnxruntime_outputs(model, feeds)["last_hidden_state"]
    assert got.shape == (1, 128, 256)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_bert_encoder_with_a_ragged_sequence_matches_onnxruntime(target):
    """A sequence of 37 tokens (prime, as a ViT's 197): the attention matmuls Q.K^T [4,37,16] x
    [4,16,37] and P.V compute padded sums on CPU targets (AlterOpLayout's matmul_padding)."""
    model = bert_encoder(seed=5, seq=37, hidden=64, heads=4, layers=1, vocab=100)
    feeds = _inputs(37, 100, seed=1)
    got = compile_and_run(model, feeds, opt_level=3, target=target.target)["last_hidden_state"]
    ref = onnxruntime_outputs(model, feeds)["last_hidden_state"]
    assert got.shape == (1, 37, 64)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
