"""Chinese text for embedding layers: jieba segmentation, word and character vocabularies, encoding into
word ids plus per-word character ids, pretrained word2vec vectors, word lists, and vectors composed from
characters for words the vectors lack."""
from .compose import (COMPOSERS, CharComposer, ComposedVectors, ComposerFit, fit_composer, load_composed_chars,
                      neighbour_overlap, plain_char_mean)
from .encode import CharWordEncoder, EncodedBatch
from .lexicon import read_word_list
from .pretrained import PretrainedReport, load_pretrained, read_word2vec
from .tokenizer import JiebaTokenizer
from .vocab import PAD, UNK, Vocab, VocabError

__all__ = ["COMPOSERS", "CharComposer", "CharWordEncoder", "ComposedVectors", "ComposerFit", "EncodedBatch",
           "JiebaTokenizer", "PAD", "PretrainedReport", "UNK", "Vocab", "VocabError", "fit_composer",
           "load_composed_chars", "load_pretrained", "neighbour_overlap", "plain_char_mean", "read_word2vec",
           "read_word_list"]
