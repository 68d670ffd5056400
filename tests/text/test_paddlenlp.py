"""paddlenlp interop; runs where the `nlp` extra is installed (`make test` installs it: pip install -e .[nlp])."""
import pytest

from paddle_edo.text import CharWordEncoder, JiebaTokenizer, Vocab


@pytest.fixture(scope="module")
def paddlenlp_data():
    """Imported when these tests run, not when the suite is collected: paddlenlp is a large import."""
    return pytest.importorskip("paddlenlp.data")


def test_a_paddlenlp_vocab_and_tokenizer_drive_the_encoder(paddlenlp_data):
    tokens = ["[PAD]", "[UNK]", "我们", "喜欢", "自然", "语言", "处理"]
    theirs = paddlenlp_data.Vocab.from_dict({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]",
                                            pad_token="[PAD]")
    words = Vocab.from_paddlenlp(theirs)
    assert words.tokens == tokens
    tokenizer = JiebaTokenizer.from_paddlenlp(paddlenlp_data.JiebaTokenizer(theirs))
    assert tokenizer.cut("我们喜欢自然语言处理") == ["我们", "喜欢", "自然", "语言", "处理"]
    chars = Vocab.build([list("我们喜欢自然语言处理")])
    batch = CharWordEncoder(tokenizer, words, chars, max_words=8).encode_batch(["我们喜欢自然语言处理"])
    assert batch.word_ids[0, :5].tolist() == [2, 3, 4, 5, 6]


def test_a_vocab_with_other_special_tokens_is_reindexed(paddlenlp_data):
    theirs = paddlenlp_data.Vocab.from_dict({"<unk>": 0, "好": 1, "<pad>": 2}, unk_token="<unk>", pad_token="<pad>")
    assert Vocab.from_paddlenlp(theirs).tokens == ["[PAD]", "[UNK]", "好"]
