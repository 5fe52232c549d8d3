"""Where each listed mistake of the course's exercises is taught: the class report links
every named mistake to that section of its lesson.

``TAUGHT`` maps an exercise id to the heading of the lesson section that teaches what its
mistakes get wrong, with exceptions for single mistakes (by their index in the exercise's
``mistakes``). A heading from another lesson is written ``"<lesson id>: <heading>"``.
"""

from __future__ import annotations

import re
import unicodedata

TAUGHT: dict[str, tuple[str, dict[int, str]]] = {
    # 01: one head from scratch
    "heads.single_head": (r"Why divide by $\sqrt{d_h}$?", {3: "A soft dictionary look-up",
                                                          5: "From tokens to queries, keys and values"}),
    "heads.batched_head": (r"Why divide by $\sqrt{d_h}$?", {2: "A soft dictionary look-up",
                                                           3: "From tokens to queries, keys and values"}),
    "onehead.stable_softmax": ("Large scores: `exp` overflows, so shift each row by its own max", {}),
    # 02: why several heads
    "why.combine_heads": ("Why one average is not enough", {}),
    "why.ablate_head": ("The experiment", {}),
    "why.attention_share": ("Looking inside: what each head attends to", {}),
    # 03: dimension math
    "dims.split_heads": ("Why view first, then transpose", {}),
    "dims.heads_into_batch": ("Why view first, then transpose", {0: "Batched matmul: all heads at once"}),
    "dims.shapes": ("One tensor, step by step", {}),
    "dims.weights_mib": ("Sizes of real models", {}),
    "heads.multi_query_head": ("Why view first, then transpose", {0: "One tensor, step by step",
                                                                 3: r"01-one-head: Why divide by $\sqrt{d_h}$?"}),
    # 04: parameter counts
    "params.mha_params": ("The count does not depend on h", {}),
    "params.cross_gqa_params": ("Grouped-query and multi-query attention: fewer key and value weights",
                                {k: "07-cross-attention: Inside cross-attention: `kdim` and `vdim`"
                                 for k in (0, 1, 4, 7)}),
    "params.max_kv_heads": ("A first look at the KV cache",
                            {0: "Grouped-query and multi-query attention: fewer key and value weights"}),
    # 05: causal masking
    "masking.causal_mask": ("Pitfall 4: fewer queries than keys, and where the triangle sits",
                            {0: "Pitfall 3: PyTorch's two opposite boolean conventions",
                             2: "The idea: block the scores above the diagonal"}),
    "masking.masked_softmax": ("Pitfall 2: the row with nothing allowed",
                               {0: "Pitfall 3: PyTorch's two opposite boolean conventions",
                                2: "Pitfall 1: `-1e9` instead of `-inf`"}),
    "masking.decoder_mask": ("Padding meets causality", {0: "Pitfall 3: PyTorch's two opposite boolean conventions"}),
    # 06: the layer step by step
    "layer.concat_heads": ("$W_O$: where the heads meet", {2: "Version 2: one batched reshape",
                                                            3: "Version 2: one batched reshape"}),
    "layer.split_qkv_gqa": ("The `split(3)` bug", {1: "Version 2: one batched reshape",
                                                   3: "11-kv-cache-gqa-mla: Fewer key/value heads: MQA and GQA"}),
    "layer.attention_dropout": ("Attention dropout", {}),
    "layer.fuse_head_weights": ("Version 3: one fused projection", {}),
    "layer.dropout_row_spread": ("Attention dropout", {}),
    # 07: cross-attention
    "cross.cross_attention_shapes": ("Inside cross-attention: `kdim` and `vdim`", {}),
    "cross.mask_for_role": ("Which mask for which role", {0: "The same masks in PyTorch's modules",
                                                          1: "Pitfall: a causal mask on cross-attention",
                                                          2: "Pitfall: a causal mask on cross-attention",
                                                          3: "Pitfall: padding on the query axis",
                                                          4: "Pitfall: padding on the query axis"}),
    "cross.alignment_accuracy": ("Where does the decoder look?", {}),
    # 08: gradients
    "grads.softmax_jacobian": ("The softmax Jacobian", {}),
    "grads.gqa_kv_grad": (r"Back to the queries and keys: $dQ = s\, dS\, K$ and $dK = s\, dS^\top Q$",
                          {0: "11-kv-cache-gqa-mla: Fewer key/value heads: MQA and GQA"}),
    "grads.scale_grad": (r"Back to the queries and keys: $dQ = s\, dS\, K$ and $dK = s\, dS^\top Q$",
                         {0: "The softmax Jacobian"}),
    "grads.linear_backward": (r"The output projection: $dW_O = O^\top dY$", {}),
    # 09: the cost of attention
    "cost.cross_layer_flops": ("Counting the FLOPs of one layer", {}),
    "cost.flop_growth": ("When does the $T^2$ part take over?", {}),
    "cost.crossover_length": ("When does the $T^2$ part take over?", {}),
    "cost.backward_flops": ("What each path keeps for the backward pass", {}),
    "cost.loglog_slope": ("Time against length", {}),
    # 10: FlashAttention from scratch
    "flash.online_softmax_stats": ("The online softmax", {}),
    "flash.merge_partials": ("The online softmax", {}),
    "flash.wasted_scores": ("The tiles, step by step",
                            {1: "05-causal-masking: Pitfall 4: fewer queries than keys, and where the triangle sits"}),
    "flash.tiled_window_forward": ("The tiles, step by step",
                                   {1: "05-causal-masking: Pitfall 4: fewer queries than keys, and where the triangle sits",
                                    3: "The online softmax", 4: "The online softmax",
                                    5: r"01-one-head: Why divide by $\sqrt{d_h}$?"}),
    # 11: the KV cache, GQA, MQA and MLA
    "decode.decode_step": ("Decoding with a KV cache", {}),
    "decode.gqa_from_mha": ("Fewer key/value heads: MQA and GQA", {}),
    "decode.rope_rotate": ("Rotary position embeddings (RoPE)", {3: "RoPE meets the KV cache"}),
    "decode.mla_max_context": ("Multi-head latent attention (MLA)", {3: "The cache of published models",
                                                                     4: "The cache of published models"}),
    # 12: PyTorch's built-ins
    "builtins.torch_masks_to_allowed": ("Masks: `True` means *blocked*", {}),
    "builtins.document_mask": ("`flex_attention`: attention you describe in Python",
                               {3: "Masks: `True` means *blocked*"}),
    "builtins.alibi_slopes": ("`flex_attention`: attention you describe in Python", {}),
    # 13: induction heads
    "induction.k_composition": ("How the two heads work together: K-composition", {}),
    "induction.prefix_matching_score": ("Finding the heads by measurement", {}),
    "induction.mean_ablate_head": ("Removing heads: which ones matter?", {}),
    "induction.composing_head": ("How the two heads work together: K-composition", {}),
    # 14: FlashAttention in Triton
    "kernels.row_softmax": ("Programs, blocks and masks", {}),
    "kernels.row_lse": ("The forward kernel, read against lesson 10's loop",
                        {k: "Causal attention: which blocks run, and which need a mask" for k in (4, 5)}),
    "kernels.fixed_attention": ("Causal attention: which blocks run, and which need a mask", {}),
    "kernels.tiles_visited": ("Causal attention: which blocks run, and which need a mask", {}),
}


def anchor(heading: str) -> str:
    """The id the website gives a section with this heading (docutils' ``make_id``: lower
    case, ASCII, every run of other characters one hyphen; MyST's maths ``$\\sqrt{d_h}$``
    counts as its TeX text)."""
    text = heading.replace("$", "").lower()
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-z0-9]+", "-", " ".join(text.split()))
    return re.sub(r"^[-0-9]+|-+$", "", text)


def plain_title(heading: str) -> str:
    """A heading as plain text: its maths and code marks turned into characters."""
    text = re.sub(r"\\sqrt\{([^}]*)\}", "\u221a\\1", heading)
    text = text.replace("^\\top", "\u1d40").replace("\\,", " ")
    return " ".join(re.sub(r"[$`*]", "", text).split())


def _sections() -> tuple[dict, dict]:
    from . import EXERCISES

    sections, titles = {}, {}
    for exercise_id, (default, exceptions) in TAUGHT.items():
        ex = EXERCISES.get(exercise_id)
        if ex is None:
            continue
        for k in range(len(ex.mistakes)):
            heading = exceptions.get(k, default)
            lesson, sep, title = heading.partition(": ") if re.match(r"\d\d-[\w-]+: ", heading) else ("", "", heading)
            key = f"{lesson or ex.lesson}#{anchor(title)}"
            sections[exercise_id, k] = key
            titles[key] = plain_title(title)
    return sections, titles


def __getattr__(name):  # worked out on first use: the exercises import this package first
    if name in ("SECTIONS", "TITLES"):
        sections, titles = _sections()
        globals().update(SECTIONS=sections, TITLES=titles)
        return globals()[name]
    raise AttributeError(name)
