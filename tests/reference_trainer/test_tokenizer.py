import pytest


def test_round_trip(tok):
    text = "<bos> task clamp <call> edit 3 <end> <obs> ok <call> submit <end>"
    assert tok.decode(tok.encode(text)) == text
    ids = list(range(len(tok)))
    assert tok.encode(tok.decode(ids)) == ids


def test_unknown_word_is_an_error(tok):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("<call> delete <end>")
