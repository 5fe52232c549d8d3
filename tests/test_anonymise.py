"""Student code on a page to share (mha.grading.anonymise): nothing a student wrote in words,
no identifier made of a name, and one fingerprint for answers that differ only in names,
formatting, comments, strings and annotations."""

from __future__ import annotations

import ast

from mha.grading.anonymise import anonymous_code, fingerprint, mask_names, name_tokens

SIGNED = '''
import torch
import torch.nn.functional as F
STUDENT_ID = 20231147

def leblanc_helper(x):
    """by Victor"""
    return x

class Victor:
    def __init__(self):
        self.victor_scale = 2

def stable_softmax(scores):
    """Written by Victor Leblanc, student id 20231147"""
    # a comment by Victor
    "a bare string, as a comment"
    if scores.dim() == 0:
        raise ValueError(f"needs a row -- Victor {scores.shape}")
    masked = scores.masked_fill(scores == float("-inf"), float('-inf'))
    mixed = torch.einsum("bij,bjk->bik", scores, scores)
    named = torch.einsum("victor,leblanc", scores, scores)
    e = leblanc_helper(scores).exp()
    return e / e.sum(-1, keepdim=True), b"victor", Victor().victor_scale
'''


def anonymised(source: str, *names: str) -> str:
    return anonymous_code(ast.parse(source).body, name_tokens(*names), keep={"stable_softmax"})


def test_docstrings_comments_strings_and_names_are_gone():
    code = anonymised(SIGNED, "victor_leblanc", "20231147")
    low = code.lower()
    assert "victor" not in low and "leblanc" not in low and "20231147" not in low
    assert "written" not in low and "comment" not in low and "needs a row" not in low
    assert "raise ValueError('...')" in code and "b'...'" in code
    assert "def stable_softmax(scores):" in code and "STUDENT_ID = 0" in code


def test_the_maths_in_strings_stays():
    code = anonymised(SIGNED, "victor_leblanc")
    assert "float('-inf')" in code and "torch.einsum('bij,bjk->bik', scores, scores)" in code
    assert "torch.einsum('...', scores, scores)" in code, "subscripts that hold a name go too"


def test_the_words_of_file_names_that_are_not_names_are_kept():
    assert name_tokens("05-causal-masking-Copy1") == frozenset()
    assert name_tokens("li_wei (section-b)") == {"wei"}
    assert name_tokens("Ana Silva", "77777", "ab12") == {"ana", "silva", "77777"}
    code = anonymised("def stable_softmax(x):\n    causal_mask = x\n    return max(causal_mask)\n", "05-causal-masking")
    assert "causal_mask" in code and "max(" in code


def test_names_known_later_are_masked_in_stored_code():
    code = anonymised(SIGNED, "someone_else")
    assert "victor" in code.lower()
    masked = mask_names(code, name_tokens("Victor Leblanc"), keep={"stable_softmax"})
    assert "victor" not in masked.lower() and "leblanc" not in masked.lower()
    assert mask_names(masked, name_tokens("Victor Leblanc")) == masked


def test_one_fingerprint_for_answers_that_differ_only_in_names_formatting_and_words():
    one = "import torch\ndef f(x):\n    '''doc'''\n    e = torch.exp(x)  # c\n    return e / e.sum(dim=-1, keepdim=True)\n"
    two = ("import torch as T\ndef f(s: 'tensor') -> 'tensor':\n    ex = T.exp(s)\n"
           "    return (ex /\n            ex.sum(dim=-1, keepdim=True))\n")
    three = "from torch import exp\ndef f(s):\n    out = exp(s)\n    return out / out.sum(dim=-1, keepdim=True)\n"
    other = "import torch\ndef f(x):\n    e = torch.exp(x)\n    return e / e.sum(dim=-2, keepdim=True)\n"
    prints = {fingerprint(c, "f") for c in (one, two, three)}
    assert len(prints) == 1 and "" not in prints
    assert fingerprint(other, "f") not in prints
    assert fingerprint("def f(:", "f") == ""


def test_a_message_shown_beside_the_code_loses_any_word_that_holds_a_name():
    from mha.grading.anonymise import mask_text

    text = "public check 1: raised ValueError: by Victor_Leblanc (id 20231147)"
    assert mask_text(text, name_tokens("Victor Leblanc", "20231147")) == \
        "public check 1: raised ValueError: by [name] (id [name])"
    assert mask_text(text, frozenset()) == text
