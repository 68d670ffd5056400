"""Chinese text for embedding layers: jieba segmentation, word and character vocabularies, encoding into
word ids plus per-word character ids, and pretrained word2vec vectors."""
from .encode import CharWordEncoder, EncodedBatch
from .lexicon import read_word_list
from .pretrained import PretrainedReport, load_pretrained, read_word2vec
from .tokenizer import JiebaTokenizer
from .vocab import PAD, UNK, Vocab, VocabError

__all__ = ["CharWordEncoder", "EncodedBatch", "JiebaTokenizer", "PAD", "PretrainedReport", "UNK", "Vocab",
           "VocabError", "load_pretrained", "read_word2vec", "read_word_list"]
