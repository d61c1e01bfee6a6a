"""Architecture families: where a pretrained model keeps each head's query/key projections.

A family adapter tells :class:`attnsvm.real.pretrained.PretrainedTransformer` how to read one
architecture. Every supported family scores key token t for query token s with a fixed
bilinear form of the states the projections act on,

    score(s, t) = (W_K^T x_t + b_K) . (W_Q^T x_s + b_Q) * scale      (+ mask)

so the key-query matrix of :mod:`attnsvm.real.pretrained` (key on the left, bias augmentation
with a constant 1) reproduces the model's attention exactly.

Families
--------
``bert`` (model types bert, roberta): post-LN encoders. The head acts on the hidden state
    entering the layer (``hidden_states[l]``); ``W_Q = query.weight[h m:(h+1) m].T``, same for
    the key; scale ``1/sqrt(m)``; no causal mask.
``gpt2`` (model type gpt2): pre-LN decoders. The head acts on ``ln_1(hidden_states[l])``
    (the layer norm applied before attention). ``c_attn`` is a Conv1D with weight (d, 3d)
    (``y = x W + b``) whose columns are ``[q | k | v]``, each d columns split into heads of m
    consecutive columns: ``W_Q = c_attn.weight[:, h m:(h+1) m]``, ``W_K = c_attn.weight[:, d +
    h m: d + (h+1) m]``. Scale ``1/sqrt(m)`` if ``scale_attn_weights`` (default), further divided
    by ``layer + 1`` if ``scale_attn_by_inverse_layer_idx``. Causal: query s sees keys t <= s.

Families whose scores are not a fixed bilinear form of the states are refused with
:class:`UnsupportedModelError`: rotary position embeddings (llama, mistral, gpt_neox, ...) rotate
queries and keys by position, ALiBi (bloom, mpt, ...) adds a distance-dependent bias.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnsvm.errors import ValidationError


class UnsupportedModelError(ValidationError):
    """The model's architecture has no key-query matrix the probe can read (or is not implemented)."""


ROTARY = {"llama", "mistral", "mixtral", "gpt_neox", "gptj", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi", "phi3",
          "gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "starcoder2", "stablelm", "olmo", "olmo2", "cohere",
          "persimmon", "codegen", "gpt_neox_japanese", "deepseek_v2", "deepseek_v3", "granite", "internlm2", "roformer",
          "esm", "nemotron", "exaone", "glm", "glm4", "chatglm"}
ALIBI = {"bloom", "mpt", "baichuan"}
ROTARY_REASON = ("it uses rotary position embeddings: queries and keys are rotated by their positions, so the "
                 "attention score is not a fixed bilinear form x_t^T W x_s of the token states")
ALIBI_REASON = ("it uses ALiBi: a bias growing with the query-key distance is added to every score, so the "
                "attention is not a fixed bilinear form x_t^T W x_s of the token states")


@dataclass(frozen=True)
class Family:
    """How to read one architecture family.

    Attributes
    ----------
    name : "bert" or "gpt2"
    causal : query s attends to keys t <= s only
    pre_norm : the head acts on a layer norm of the residual stream (GPT-2's ``ln_1``)
    token_type_ids : pass zero token type ids to the model (BERT-like)
    """

    name: str
    causal: bool
    pre_norm: bool
    token_type_ids: bool

    # ---------------------------------------------------------------- modules
    def body(self, model):
        """The transformer body (the base model without a task head)."""
        for attr in ("bert", "roberta", "transformer"):
            inner = getattr(model, attr, None)
            if inner is not None and not isinstance(inner, (bool, int, str)):
                return inner
        return model

    def norm_module(self, model, layer: int):
        """The layer norm applied to ``hidden_states[layer]`` before attention (None for post-LN)."""
        if not self.pre_norm:
            return None
        return self.body(model).h[layer].ln_1

    def projections(self, model, layer: int, head: int, head_dim: int, d: int):
        """Torch tensors ``W_K (d, m), W_Q (d, m), b_K (m,), b_Q (m,)`` of one head (``key_t = W_K^T x_t + b_K``)."""
        lo, hi = head * head_dim, (head + 1) * head_dim
        body = self.body(model)
        if self.name == "bert":
            att = body.encoder.layer[layer].attention.self
            return att.key.weight[lo:hi].T, att.query.weight[lo:hi].T, att.key.bias[lo:hi], att.query.bias[lo:hi]
        attn = body.h[layer].attn
        w, b = attn.c_attn.weight, attn.c_attn.bias  # Conv1D: (d, 3d), (3d,), columns [q | k | v]
        return w[:, d + lo:d + hi], w[:, lo:hi], b[d + lo:d + hi], b[lo:hi]

    # ---------------------------------------------------------------- config and weight files
    def dims(self, config, where: str = "the model") -> dict:
        """The sizes the config declares, each a positive integer (else a ValidationError naming the field).

        Returns
        -------
        dict with ``layers, heads, d, positions, vocab, inner`` (and ``types`` for BERT-like models),
        read through the transformers config's attribute names (``num_hidden_layers`` is GPT-2's ``n_layer``)
        """
        fields = {"layers": "num_hidden_layers", "heads": "num_attention_heads", "d": "hidden_size",
                  "positions": "max_position_embeddings", "vocab": "vocab_size"}
        fields.update({"inner": "intermediate_size", "types": "type_vocab_size"} if self.name == "bert"
                      else {"inner": "n_inner"})
        out = {}
        for key, attr in fields.items():
            value = getattr(config, attr, None)
            if key == "inner" and value is None and self.name == "gpt2":  # GPT-2's default MLP width
                value = 4 * out["d"]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{where}: its config declares {attr} = {value!r}; expected a positive integer")
            out[key] = value
        if out["d"] % out["heads"]:
            raise ValidationError(f"{where}: hidden_size {out['d']} is not a multiple of num_attention_heads "
                                  f"{out['heads']} (every head needs the same size)")
        return out

    def n_params(self, dims: dict) -> int:
        """Parameters of the base model as :meth:`dims` declares it (what building it allocates)."""
        d, inner, L = dims["d"], dims["inner"], dims["layers"]
        if self.name == "bert":
            embed = (dims["vocab"] + dims["positions"] + dims["types"]) * d + 2 * d
            layer = 4 * (d * d + d) + 2 * d + (d * inner + inner) + (inner * d + d) + 2 * d
            return embed + L * layer + d * d + d  # + pooler
        embed = (dims["vocab"] + dims["positions"]) * d
        layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * inner + inner) + (inner * d + d)
        return embed + L * layer + 2 * d  # + ln_f

    def query_key_tensors(self, layer: int) -> tuple:
        """Names (in the base model, without a task model's prefix) of the weights holding layer's W_Q and W_K."""
        if self.name == "bert":
            return (f"encoder.layer.{layer}.attention.self.query.weight",
                    f"encoder.layer.{layer}.attention.self.key.weight")
        return (f"h.{layer}.attn.c_attn.weight",)

    def missing_query_key(self, names, n_layers: int, show: int = 6) -> tuple:
        """The query/key weights of layers 0..n_layers-1 that ``names`` (tensor names of the weight files,
        with or without a task model's prefix such as ``bert.`` or ``transformer.``) lack.

        Returns ``(count, first)``: how many are missing and the first ``show`` of them in layer order."""
        have = set()
        for n in names:
            have.add(n)
            head, _, rest = n.partition(".")
            if head in ("bert", "roberta", "transformer"):
                have.add(rest)
        count, first = 0, []
        for l in range(n_layers):
            for t in self.query_key_tensors(l):
                if t not in have:
                    count += 1
                    if len(first) < show:
                        first.append(t)
        return count, first

    def scale(self, config, layer: int, head_dim: int) -> float:
        """The factor the scores are multiplied by (1/sqrt(m), GPT-2 optionally also 1/(layer + 1))."""
        if self.name == "bert":
            return float(head_dim) ** -0.5
        s = float(head_dim) ** -0.5 if getattr(config, "scale_attn_weights", True) else 1.0
        if getattr(config, "scale_attn_by_inverse_layer_idx", False):
            s /= float(layer + 1)
        return s


BERT = Family("bert", causal=False, pre_norm=False, token_type_ids=True)
GPT2 = Family("gpt2", causal=True, pre_norm=True, token_type_ids=False)
FAMILIES = {"bert": BERT, "roberta": BERT, "gpt2": GPT2}
SUPPORTED = "BERT-like encoders (model_type bert, roberta) and GPT-2-like decoders (model_type gpt2)"


def family_of(config, where: str = "the model") -> Family:
    """The family adapter of a ``transformers`` config, or :class:`UnsupportedModelError` saying why not."""
    mtype = str(getattr(config, "model_type", "") or "")
    if mtype in ROTARY or getattr(config, "rope_theta", None) is not None or getattr(config, "rotary_dim", None) \
            or getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None):
        raise UnsupportedModelError(f"{where} (model_type {mtype!r}) is not supported: {ROTARY_REASON}. "
                                    f"Supported: {SUPPORTED}")
    if mtype in ALIBI or getattr(config, "alibi", False):
        raise UnsupportedModelError(f"{where} (model_type {mtype!r}) is not supported: {ALIBI_REASON}. "
                                    f"Supported: {SUPPORTED}")
    if mtype not in FAMILIES:
        raise UnsupportedModelError(f"{where} has model_type {mtype!r}, which the probe does not read yet. "
                                    f"Supported: {SUPPORTED}")
    fam = FAMILIES[mtype]
    if fam is BERT:
        pos = getattr(config, "position_embedding_type", "absolute")
        if pos not in (None, "absolute"):
            raise UnsupportedModelError(f"{where} uses position_embedding_type {pos!r}: relative position terms "
                                        f"make the score not a fixed bilinear form of the states. Supported: absolute")
        if getattr(config, "is_decoder", False):
            raise UnsupportedModelError(f"{where} is a BERT configured as a decoder (is_decoder=True); "
                                        "the probe reads BERT-like models as encoders only")
    return fam
