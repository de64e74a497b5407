"""rlinfra_node.tiny_model's shape options: what is refused before any work, and what the done
marker records (folders made before the options existed still match)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlinfra_node import tiny_model
from rlinfra_node.tiny_model import Shape, TinyModelError


def test_default_shape_marks_nothing_new() -> None:
    assert Shape(hidden=64, layers=2).marker() == {}
    qwen = Shape(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, model_vocab=151936)
    qwen.check()
    assert qwen.marker() == {
        "heads": 14,
        "kv_heads": 2,
        "intermediate": 4864,
        "model_vocab": 151936,
    }
    assert (qwen.n_heads, qwen.n_kv_heads) == (14, 2)
    assert (Shape(hidden=64).n_heads, Shape(hidden=64).n_kv_heads) == (4, 4)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (Shape(hidden=64, heads=5), "not a multiple of 5 heads"),
        (Shape(hidden=64, heads=4, kv_heads=3), "cannot share 3 key/value heads"),
        (Shape(hidden=60), "multiple of 16"),
        (Shape(hidden=64, intermediate=0), "--intermediate"),
    ],
)
def test_bad_shapes_are_refused(shape: Shape, message: str) -> None:
    with pytest.raises(TinyModelError, match=message):
        shape.check()


def test_bad_shape_exits_2_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "model"
    code = tiny_model.main(["--out", str(out), "--hidden", "64", "--heads", "5"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "Error: --hidden 64 is not a multiple of 5 heads"
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_model_of_given_shapes_is_made_and_marked(tmp_path: Path) -> None:
    import json

    out = tmp_path / "model"
    shape = Shape(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=48, model_vocab=700)
    assert tiny_model.make(out, [tiny_model.SAMPLE], vocab=320, shape=shape)
    config = json.loads((out / "config.json").read_text())
    assert config["num_attention_heads"] == 2
    assert config["num_key_value_heads"] == 1
    assert config["intermediate_size"] == 48
    assert config["vocab_size"] == 700  # embedding rows beyond the 320-token tokenizer
    marker = json.loads((out / tiny_model.MARKER).read_text())
    assert marker["model_vocab"] == 700 and marker["heads"] == 2
    assert not tiny_model.make(out, [tiny_model.SAMPLE], vocab=320, shape=shape)
    with pytest.raises(TinyModelError, match="holds a tiny model made with"):
        tiny_model.make(out, [tiny_model.SAMPLE], vocab=320, shape=Shape(hidden=32, layers=1))
    with pytest.raises(TinyModelError, match="--model-vocab 300 is smaller than the tokenizer"):
        tiny_model.make(
            tmp_path / "small", [tiny_model.SAMPLE], vocab=320, shape=Shape(model_vocab=300)
        )
    assert not (tmp_path / "small").exists()
