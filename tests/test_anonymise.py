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


# ----------------------------------------------------------------------------- whole words, never the course's text

# Fifty common first names (and a family name with them where it matters): those of the review's
# class, short ones that are pieces of the course's words (Max: softmax, Tom: bottom, Ali: align,
# Li Wei: weights), and others that are English words.
FIFTY = ("Max Weber", "Tom Lee", "Ali Khan", "Li Wei", "Ana Sun", "Ian Ross", "Eva Dahl", "Sam Ward", "Ray Cho",
         "Dan Ng", "Will", "Mark", "Grace", "Hope", "Rose", "June", "Faith", "Joy", "Sky", "Art", "Ben", "Ada", "Eve",
         "Leo", "Kim", "Lin", "Jin", "Amy", "Zoe", "Noah", "Liam", "Emma", "Olivia", "Mia", "Lucas", "Sofia",
         "Mateo", "Aria", "Omar", "Fatima", "Yusuf", "Priya", "Arjun", "Chen", "Wang", "Mohammed", "Maria", "Jose",
         "Sara", "Victor")


def test_fifty_common_names_are_fifty():
    assert len(set(FIFTY)) == 50


def test_a_name_is_masked_as_a_whole_word_never_as_a_piece_of_one():
    code = ("def f(x):\n    weights = x.softmax(-1)\n    row_max = x.amax(-1)\n    bottom = weights + row_max\n"
            "    align = bottom\n    tom_helper = align\n    li_wei_mask = tom_helper\n    MaxNet = li_wei_mask\n"
            "    return MaxNet\n")
    masked = anonymised(code, "Tom Baker", "Li Wei", "Max Weber")
    for kept in ("weights", "row_max", "bottom", "align", "softmax"):
        assert kept in masked, kept
    assert "tom_helper" not in masked and "li_wei_mask" not in masked
    assert "name_1 = align" in masked and "name_2 = name_1" in masked
    assert "MaxNet" in masked, "max is a word of the course's code, no one's name"


def test_the_words_of_the_course_s_code_are_no_one_s_name():
    from mha.grading.anonymise import code_words

    assert {"max", "sum", "bottom", "align", "weights", "mask"} <= code_words()
    assert name_tokens("Max Weber") == {"weber"} and name_tokens("Tom Baker") == {"tom", "baker"}


def test_the_strings_that_decide_an_answer_are_kept_and_its_words_go():
    code = ('import warnings\n\ndef shapes(b, t, c, h):\n    """Victor\'s answer"""\n'
            '    if c % h:\n        raise ValueError(f"c={c} not divisible by h={h}")\n'
            '    assert h > 0, "victor says h > 0"\n    print("debug: victor")\n    warnings.warn("victor")\n'
            '    grid = torch.meshgrid(torch.arange(t), torch.arange(t), indexing="ij")\n'
            '    note = "by victor"\n'
            '    return {"qkv": (b, t, 3 * c), "q_heads": (b, h, t, c // h), "merged": (b, t, c)}\n')
    out = anonymised(code, "Victor Leblanc")
    assert "'qkv'" in out and "'q_heads'" in out and "'merged'" in out and "indexing='ij'" in out
    assert "victor" not in out.lower() and "note = '...'" in out
    assert "raise ValueError('...')" in out and "assert h > 0, '...'" in out and "print('...')" in out


def test_answers_that_differ_in_a_string_that_decides_have_different_fingerprints():
    """Three dims.shapes answers of the review: a key misspelt, another misspelt, two swapped."""
    head = "def shapes(batch, seq_len, embed_dim, num_heads):\n    B, T, C, h = batch, seq_len, embed_dim, num_heads\n"
    right = head + '    return {"qkv": (B, T, 3 * C), "q_heads": (B, h, T, C // h), "merged": (B, T, C)}\n'
    one = head + '    return {"qkv": (B, T, 3 * C), "q_heads": (B, h, T, C // h), "merge": (B, T, C)}\n'
    two = head + '    return {"qkv": (B, T, 3 * C), "qheads": (B, h, T, C // h), "merged": (B, T, C)}\n'
    swapped = head + '    return {"qkv": (B, T, 3 * C), "merged": (B, h, T, C // h), "q_heads": (B, T, C)}\n'
    prints = [fingerprint(c, "shapes") for c in (right, one, two, swapped)]
    assert len(set(prints)) == 4
    worded = right.replace("    B, T", '    """mine"""\n    if embed_dim % num_heads:\n        raise ValueError('
                           '"C must divide")\n    B, T')
    other_words = worded.replace("C must divide", "embed_dim must be a multiple of num_heads")
    assert fingerprint(worded, "shapes") == fingerprint(other_words, "shapes"), "messages are words, not the answer"


def test_an_import_inside_the_function_and_a_name_returned_at_once_change_nothing():
    """The review's float mask written with ``import torch as th`` inside, and J = ...; return J."""
    plain = "import torch\n\ndef causal_mask(q, k):\n    return torch.ones(q, k).tril(diagonal=k - q)\n"
    inside = "def causal_mask(q, k):\n    import torch as th\n    mask = th.ones(q, k).tril(diagonal=k - q)\n" \
             "    return mask\n"
    temp = "import torch\n\ndef causal_mask(q, k):\n    m = torch.ones(q, k).tril(diagonal=k - q)\n    return m\n"
    used_twice = "import torch\n\ndef causal_mask(q, k):\n    m = torch.ones(q, k)\n    m = m.tril(diagonal=k - q)\n" \
                 "    return m\n"
    prints = {fingerprint(c, "causal_mask") for c in (plain, inside, temp)}
    assert len(prints) == 1
    assert fingerprint(used_twice, "causal_mask") not in prints, "only a name assigned once and returned at once"


def test_the_code_shown_has_each_import_once_first_and_only_those_it_uses():
    stmts = ast.parse("import torch\ndef f(x):\n    return torch.exp(x)\nimport torch\nimport numpy as np\n"
                      "import torch\n").body
    assert anonymous_code(stmts, keep={"f"}) == "import torch\n\ndef f(x):\n    return torch.exp(x)"
