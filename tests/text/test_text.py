import struct

import numpy as np
import paddle
import pytest

from paddle_edo.text import CharWordEncoder, JiebaTokenizer, Vocab, VocabError, load_pretrained, read_word2vec

CORPUS = [["我们", "喜欢", "这本书"], ["这本书", "很", "好"], ["我们", "不", "喜欢"]]


def test_vocab_builds_by_frequency_with_pad_and_unk_first():
    vocab = Vocab.build(CORPUS, min_freq=2)
    assert vocab.tokens == ["[PAD]", "[UNK]", "我们", "喜欢", "这本书"]
    assert vocab.ids(["喜欢", "没见过"]) == [3, 1]
    assert Vocab.build(CORPUS, max_size=4, specials=["[CLS]"]).tokens == ["[PAD]", "[UNK]", "[CLS]", "我们"]
    with pytest.raises(VocabError, match="max_size = 1 must leave room"):
        Vocab.build(CORPUS, max_size=1)


def test_vocab_files_round_trip_and_bad_files_name_the_line(tmp_path):
    vocab = Vocab.build(CORPUS)
    assert Vocab.load(vocab.save(tmp_path / "words.txt")) == vocab
    (tmp_path / "dup.txt").write_text("[PAD]\n[UNK]\n我们\n喜欢\n我们\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"dup.txt: line 5: token '我们' repeats line 3"):
        Vocab.load(tmp_path / "dup.txt")
    (tmp_path / "nopad.txt").write_text("[UNK]\n我们\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"nopad.txt: \[PAD\] must be on line 1 \(id 0\); it is missing"):
        Vocab.load(tmp_path / "nopad.txt")
    (tmp_path / "late_unk.txt").write_text("[PAD]\n我们\n[UNK]\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"\[UNK\] must be on line 2 \(id 1\); it is on line 3"):
        Vocab.load(tmp_path / "late_unk.txt")
    (tmp_path / "blank.txt").write_text("[PAD]\n[UNK]\n\n", encoding="utf-8")
    with pytest.raises(VocabError, match="line 3"):
        Vocab.load(tmp_path / "blank.txt")


def test_jieba_tokenizer_user_dictionary_hmm_and_shared_dictionary(tmp_path):
    plain = JiebaTokenizer()
    assert plain.cut("我们喜欢这本书") == ["我们", "喜欢", "这", "本书"]
    assert JiebaTokenizer().jieba is plain.jieba  # the dictionary is loaded once per process
    user = tmp_path / "user.txt"
    user.write_text("这本书 100 n\n", encoding="utf-8")
    assert JiebaTokenizer([user]).cut("我们喜欢这本书") == ["我们", "喜欢", "这本书"]
    # HMM joins characters jieba's dictionary lacks into new words; without it they stay apart
    assert JiebaTokenizer(hmm=True).cut("他来到了网易杭研大厦")[-2:] == ["杭研", "大厦"]
    assert JiebaTokenizer(hmm=False).cut("他来到了网易杭研大厦")[-3:] == ["杭", "研", "大厦"]
    assert plain.cut("  hello   world ") == ["hello", "world"]  # whitespace is not a word
    with pytest.raises(FileNotFoundError, match="missing.txt does not exist"):
        JiebaTokenizer([tmp_path / "missing.txt"])


def test_encoder_pads_caps_and_never_fails_on_odd_text():
    words = Vocab.build(CORPUS)
    chars = Vocab.build([list("我们喜欢这本书很好不")])
    encoder = CharWordEncoder(JiebaTokenizer(), words, chars, max_words=4, max_chars_per_word=2)
    batch = encoder.encode_batch(["我们喜欢这本书", "", "hello 123", "中华人民共和国万岁万岁万岁万岁"])
    assert batch.word_ids.shape == (4, 4) and batch.char_ids.shape == (4, 4, 2)
    assert batch.word_ids[0].tolist() == [2, 3, 1, 1]  # 这 / 本书: not in the word vocabulary
    assert batch.char_ids[0, 3].tolist() == [chars.id("本"), chars.id("书")]
    assert not batch.word_mask[1].any() and not batch.char_ids[1].any()  # empty text: padding only
    assert batch.word_ids[2, :2].tolist() == [1, 1] and batch.char_ids[2, 0].tolist() == [1, 1]  # unseen chars
    assert batch.char_lengths[3, 0] == 2  # 中华人民共和国: capped at max_chars_per_word
    assert batch.word_mask[3].all()       # capped at max_words
    assert encoder.unknown_words("我们喜欢这本书") == ["这", "本书"] and encoder.unknown_words("") == []
    with pytest.raises(ValueError, match="max_chars_per_word = 0"):
        CharWordEncoder(JiebaTokenizer(), words, chars, max_chars_per_word=0)


def write_word2vec(path, tokens, vectors, binary):
    with open(path, "wb") as f:
        f.write(f"{len(tokens)} {vectors.shape[1]}\n".encode())
        for token, vector in zip(tokens, vectors):
            if binary:
                f.write(token.encode() + b" " + struct.pack(f"<{len(vector)}f", *vector) + b"\n")
            else:
                f.write((token + " " + " ".join(repr(float(v)) for v in vector) + "\n").encode())


@pytest.mark.parametrize("binary", [False, True])
def test_pretrained_vectors_fill_the_rows_they_cover(tmp_path, binary):
    vocab = Vocab.build(CORPUS)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(3, 4)).astype(np.float32)
    path = tmp_path / ("vectors.bin" if binary else "vectors.txt")
    write_word2vec(path, ["喜欢", "没见过", "[UNK]"], vectors, binary)
    tokens, read = read_word2vec(path)
    assert tokens == ["喜欢", "没见过", "[UNK]"] and np.array_equal(read, vectors)
    weight = paddle.create_parameter([len(vocab), 4], "float32")
    before = weight.numpy()
    report = load_pretrained(weight, vocab, path)
    assert (report.hits, report.misses, report.file_tokens) == (1, len(vocab) - 3, 3)
    after = weight.numpy()
    assert np.array_equal(after[vocab.id("喜欢")], vectors[0])
    unchanged = [i for i in range(len(vocab)) if i != vocab.id("喜欢")]
    assert np.array_equal(after[unchanged], before[unchanged])  # [UNK] is left alone


@pytest.mark.parametrize("name", ["vectors.vector", "vectors.w2v", "vectors", "text_named.bin"])
def test_the_format_is_told_from_the_bytes_not_the_name(tmp_path, name):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(50, 7)).astype(np.float32)
    tokens = [f"词{i}" for i in range(50)]
    binary = not name.startswith("text")
    write_word2vec(tmp_path / name, tokens, vectors, binary)
    read_tokens, read = read_word2vec(tmp_path / name)
    assert read_tokens == tokens and np.array_equal(read, vectors)
    with open(tmp_path / "no_newlines", "wb") as f:  # binary entries without a line end between them
        f.write(b"2 3\n" + b"".join(t.encode() + b" " + v.tobytes() for t, v in zip(tokens[:2], vectors[:2, :3])))
    assert read_word2vec(tmp_path / "no_newlines")[0] == tokens[:2]


def test_a_large_word2vec_file_reads_without_a_loop_per_value(tmp_path):
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(200_000, 16)).astype(np.float32)
    tokens = [f"w{i}" for i in range(200_000)]
    with open(tmp_path / "big.txt", "w") as f:  # word2vec's own text layout: a space after the last value
        f.write("200000 16\n" + "".join(f"{t} {' '.join(f'{x:.6f}' for x in v)} \n" for t, v in zip(tokens, vectors)))
    read_tokens, read = read_word2vec(tmp_path / "big.txt")
    assert read_tokens == tokens and np.allclose(read, vectors, atol=1e-6)
    write_word2vec(tmp_path / "big", tokens, vectors, binary=True)
    read_tokens, read = read_word2vec(tmp_path / "big")
    assert read_tokens == tokens and np.array_equal(read, vectors)


def test_bad_pretrained_files_are_refused(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("two 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 must be '<count> <dim>'"):
        read_word2vec(bad)
    short = tmp_path / "short.txt"
    short.write_text("1 3\n我们 0.1 0.2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2 has 2 values, expected 3"):
        read_word2vec(short)
    neither = tmp_path / "neither.vec"
    neither.write_bytes(b"2 3\n\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=r"neither.vec: entry 1 of 2 is cut short \(neither a word2vec text file "
                                         r"nor a binary one with 3-dim vectors\)"):
        read_word2vec(neither)
    fewer = tmp_path / "fewer.txt"
    fewer.write_text("3 2\n我们 0.1 0.2\n你们 0.3 0.4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the header says 3 vectors, the file holds 2"):
        read_word2vec(fewer)
    vocab = Vocab.build(CORPUS)
    write_word2vec(tmp_path / "v.txt", ["我们"], np.ones((1, 3), np.float32), binary=False)
    with pytest.raises(ValueError, match=r"3-dim vectors .* the table is \[7, 4\]"):
        load_pretrained(paddle.create_parameter([7, 4], "float32"), vocab, tmp_path / "v.txt")
