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

``llama`` (model type llama) and ``gpt_neox`` (model type gpt_neox, Pythia): pre-norm decoders with
    rotary position embeddings, read in the post-rotary query-key space (:attr:`Family.rotary`; see
    :meth:`attnsvm.real.pretrained.PretrainedTransformer.rotary_states` and the probe guide). The head acts on
    ``input_layernorm(hidden_states[l])``; ``q_t = W_Q^T x_t + b_Q``, ``k_t = W_K^T x_t + b_K`` and the score is
    ``(R_s q_s) . (R_t k_t) * scale = q_s^T R_(t-s) k_t * scale``, R_p the rotation of position p (the
    "rotate-half" layout: coordinate a of the rotated block is paired with a + r/2, r the rotated width).
    Llama: ``W_Q = q_proj.weight[h m:(h+1) m].T``, ``W_K = k_proj.weight[g m:(g+1) m].T`` with g = h // (H / KV)
    the key-value head that query head h shares under grouped-query attention (KV = num_key_value_heads; HF's
    ``repeat_kv``), biases when ``attention_bias``. GPT-NeoX: ``query_key_value`` (Linear, 3d outputs) holds, per
    head, m query rows, then m key rows, then m value rows (``[h 3m, h 3m + m)`` the queries of head h); only the
    first ``r = m * partial_rotary_factor`` (``rotary_pct``) coordinates of each head are rotated. Scale
    ``1/sqrt(m)``; causal. The rotation's cos and sin are the model's own (its ``rotary_emb`` module at positions
    0..T-1), so the rope types whose cos and sin depend only on the position (:data:`ROPE_TYPES`) are read.

Families whose scores are neither a fixed bilinear form of the states nor one of these rotary layouts are
refused with :class:`UnsupportedModelError` saying what is missing: other rotary variants (gptj's interleaved
pairs, sliding-window attention, rope types that depend on the sequence length, ...), ALiBi (bloom, mpt, ...)
adds a distance-dependent bias.
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
ROTARY_REASON = ("it uses rotary position embeddings in a form the probe does not read (it reads the rotate-half "
                 "rotary heads of llama and gpt_neox, in their post-rotary query-key space)")
#: what the probe lacks for a rotary model type it refuses (one line each, after ``missing:``)
ROTARY_MISSING = {
    "gptj": "interleaved rotary pairs (gptj rotates every two coordinates, not the two halves)",
    "codegen": "interleaved rotary pairs and codegen's model-parallel qkv layout",
    "mistral": "sliding-window attention (keys beyond the window are masked)",
    "mixtral": "sliding-window attention and mixture-of-experts layers",
    "qwen2": "sliding-window attention on some layers and qwen2's query/key biases layout",
    "phi": "phi's partial rotary with its own dense qkv layout and optional query/key layer norms",
    "phi3": "phi3's fused qkv projection and its longrope scaling",
    "gemma": "gemma's attention (a head size apart from the width, scaled by query_pre_attn_scalar)",
    "gemma2": "logit soft-capping and sliding windows",
    "gemma3": "query/key normalization and sliding windows",
    "qwen3": "query/key normalization (RMSNorm on queries and keys)",
    "olmo2": "query/key normalization (RMSNorm on queries and keys)",
    "cohere": "interleaved rotary pairs and query/key layer norms",
}
#: rope types (``rope_parameters["rope_type"]``) whose cos and sin depend only on the position: the model's own
#: ``rotary_emb`` gives the same rotation for a position in every batch (dynamic and longrope change with the
#: sequence length)
ROPE_TYPES = ("default", "linear", "llama3")
ALIBI_REASON = ("it uses ALiBi: a bias growing with the query-key distance is added to every score, so the "
                "attention is not a fixed bilinear form x_t^T W x_s of the token states")


@dataclass(frozen=True)
class Family:
    """How to read one architecture family.

    Attributes
    ----------
    name : "bert", "gpt2", "llama" or "gpt_neox"
    causal : query s attends to keys t <= s only
    pre_norm : the head acts on a layer norm of the residual stream (GPT-2's ``ln_1``, Llama's and GPT-NeoX's
        ``input_layernorm``)
    token_type_ids : pass zero token type ids to the model (BERT-like)
    rotary : queries and keys are rotated by their positions (llama, gpt_neox): the probe reads each head in
        its post-rotary query-key space
    """

    name: str
    causal: bool
    pre_norm: bool
    token_type_ids: bool
    rotary: bool = False

    # ---------------------------------------------------------------- modules
    def body(self, model):
        """The transformer body (the base model without a task head)."""
        for attr in ("bert", "roberta", "transformer", "gpt_neox", "model"):
            inner = getattr(model, attr, None)
            if inner is not None and not isinstance(inner, (bool, int, str)):
                return inner
        return model

    def norm_module(self, model, layer: int):
        """The layer norm applied to ``hidden_states[layer]`` before attention (None for post-LN)."""
        if not self.pre_norm:
            return None
        if self.rotary:
            return self.body(model).layers[layer].input_layernorm
        return self.body(model).h[layer].ln_1

    def kv_head(self, config, head: int) -> int:
        """The key-value head query head ``head`` reads: ``head // (H / KV)`` under grouped-query attention
        (HF's ``repeat_kv`` repeats kv head g for query heads g (H/KV) .. (g+1) (H/KV) - 1), else ``head``."""
        if self.name != "llama":
            return head
        H = int(config.num_attention_heads)
        kv = int(getattr(config, "num_key_value_heads", None) or H)
        return head // (H // kv)

    def projections(self, model, layer: int, head: int, head_dim: int, d: int):
        """Torch tensors ``W_K (d, m), W_Q (d, m), b_K (m,), b_Q (m,)`` of one head (``key_t = W_K^T x_t + b_K``)."""
        lo, hi = head * head_dim, (head + 1) * head_dim
        body = self.body(model)
        if self.name == "llama":
            att = body.layers[layer].self_attn
            g = self.kv_head(model.config, head)
            klo, khi = g * head_dim, (g + 1) * head_dim
            zero = att.q_proj.weight.new_zeros(head_dim)
            bK = att.k_proj.bias[klo:khi] if att.k_proj.bias is not None else zero
            bQ = att.q_proj.bias[lo:hi] if att.q_proj.bias is not None else zero
            return att.k_proj.weight[klo:khi].T, att.q_proj.weight[lo:hi].T, bK, bQ
        if self.name == "gpt_neox":  # per head: m query rows, m key rows, m value rows
            qkv = body.layers[layer].attention.query_key_value
            q0, k0 = 3 * head * head_dim, 3 * head * head_dim + head_dim
            zero = qkv.weight.new_zeros(head_dim)
            b = qkv.bias
            return (qkv.weight[k0:k0 + head_dim].T, qkv.weight[q0:q0 + head_dim].T,
                    b[k0:k0 + head_dim] if b is not None else zero, b[q0:q0 + head_dim] if b is not None else zero)
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
                      else {"inner": "intermediate_size"} if self.rotary else {"inner": "n_inner"})
        out = {}
        for key, attr in fields.items():
            value = getattr(config, attr, None)
            if key == "inner" and value is None and self.name == "gpt2":  # GPT-2's default MLP width
                value = 4 * out["d"]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{where}: its config declares {attr} = {value!r}; expected a positive integer")
            out[key] = value
        if self.name == "llama":  # grouped-query attention: KV key-value heads, each shared by H / KV query heads
            kv = getattr(config, "num_key_value_heads", None)
            kv = out["heads"] if kv is None else kv
            if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or out["heads"] % kv:
                raise ValidationError(f"{where}: its config declares num_key_value_heads = {kv!r}; expected a "
                                      f"positive divisor of num_attention_heads {out['heads']}")
            out["kv_heads"] = kv
            hd = getattr(config, "head_dim", None)
            if hd is not None:  # Llama may declare its head size apart from the width
                if isinstance(hd, bool) or not isinstance(hd, int) or hd < 1:
                    raise ValidationError(f"{where}: its config declares head_dim = {hd!r}; expected a positive integer")
                out["head_dim"] = hd
                return out
        if out["d"] % out["heads"]:
            raise ValidationError(f"{where}: hidden_size {out['d']} is not a multiple of num_attention_heads "
                                  f"{out['heads']} (every head needs the same size)")
        return out

    def n_params(self, dims: dict) -> int:
        """Parameters of the base model as :meth:`dims` declares it (what building it allocates)."""
        d, inner, L = dims["d"], dims["inner"], dims["layers"]
        if self.name == "llama":  # q, k, v, o (with biases, at most), gate/up/down, two RMSNorms; final norm
            m = dims.get("head_dim", d // dims["heads"])
            q, kv = dims["heads"] * m, dims["kv_heads"] * m
            layer = (d * q + q) + 2 * (d * kv + kv) + (q * d + d) + 3 * d * inner + 2 * d
            return dims["vocab"] * d + L * layer + d
        if self.name == "gpt_neox":  # two layer norms, qkv, dense, the MLP; final layer norm
            layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * inner + inner) + (inner * d + d)
            return dims["vocab"] * d + L * layer + 2 * d
        if self.name == "bert":
            embed = (dims["vocab"] + dims["positions"] + dims["types"]) * d + 2 * d
            layer = 4 * (d * d + d) + 2 * d + (d * inner + inner) + (inner * d + d) + 2 * d
            return embed + L * layer + d * d + d  # + pooler
        embed = (dims["vocab"] + dims["positions"]) * d
        layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * inner + inner) + (inner * d + d)
        return embed + L * layer + 2 * d  # + ln_f

    def query_key_tensors(self, layer: int) -> tuple:
        """Names (in the base model, without a task model's prefix) of the weights holding layer's W_Q and W_K."""
        if self.name == "llama":
            return (f"layers.{layer}.self_attn.q_proj.weight", f"layers.{layer}.self_attn.k_proj.weight")
        if self.name == "gpt_neox":
            return (f"layers.{layer}.attention.query_key_value.weight",)
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
            if head in ("bert", "roberta", "transformer", "gpt_neox", "model"):
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
        if self.name == "bert" or self.rotary:
            return float(head_dim) ** -0.5
        s = float(head_dim) ** -0.5 if getattr(config, "scale_attn_weights", True) else 1.0
        if getattr(config, "scale_attn_by_inverse_layer_idx", False):
            s /= float(layer + 1)
        return s


BERT = Family("bert", causal=False, pre_norm=False, token_type_ids=True)
GPT2 = Family("gpt2", causal=True, pre_norm=True, token_type_ids=False)
LLAMA = Family("llama", causal=True, pre_norm=True, token_type_ids=False, rotary=True)
GPT_NEOX = Family("gpt_neox", causal=True, pre_norm=True, token_type_ids=False, rotary=True)
FAMILIES = {"bert": BERT, "roberta": BERT, "gpt2": GPT2, "llama": LLAMA, "gpt_neox": GPT_NEOX}
SUPPORTED = ("BERT-like encoders (model_type bert, roberta), GPT-2-like decoders (model_type gpt2) and rotary "
             "decoders (model_type llama, gpt_neox)")


def rope_params(config) -> dict:
    """A config's rope parameters as a dict: ``rope_parameters`` (transformers 5), else the legacy ``rope_scaling``
    (with ``rope_theta``), else ``{}``."""
    for attr in ("rope_parameters", "rope_scaling"):
        value = getattr(config, attr, None)
        if isinstance(value, dict):
            return value
    return {}


def rope_type(config) -> str:
    """The rope type of a config (``rope_type``, or the legacy ``type``; "default" when none is declared)."""
    p = rope_params(config)
    return str(p.get("rope_type", p.get("type", "default")) or "default")


def _rotary_refusal(config, mtype: str, where: str):
    """Why a llama or gpt_neox config is not read (None when it is): a rope type outside :data:`ROPE_TYPES`,
    sliding-window attention, a head size that is not even."""
    kind = rope_type(config)
    if kind not in ROPE_TYPES:
        how = "changes the rotation with the sequence length" if kind in ("dynamic", "longrope") else \
            "is not one the probe reads"
        return (f"{where} (model_type {mtype!r}) is not supported: its rope_type {kind!r} {how}; missing: rope types "
                f"beyond {', '.join(ROPE_TYPES)} (whose cos and sin depend only on the position)")
    if getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", False):
        return (f"{where} (model_type {mtype!r}) is not supported: it declares sliding-window attention; missing: "
                "sliding-window masks (keys beyond the window are masked)")
    return None


def family_of(config, where: str = "the model") -> Family:
    """The family adapter of a ``transformers`` config, or :class:`UnsupportedModelError` saying why not."""
    mtype = str(getattr(config, "model_type", "") or "")
    if mtype in FAMILIES and FAMILIES[mtype].rotary:
        why = _rotary_refusal(config, mtype, where)
        if why is not None:
            raise UnsupportedModelError(f"{why}. Supported: {SUPPORTED}")
        return FAMILIES[mtype]
    if mtype in ROTARY or getattr(config, "rope_theta", None) is not None or getattr(config, "rotary_dim", None) \
            or getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None):
        missing = ROTARY_MISSING.get(mtype, f"an adapter for the attention of model_type {mtype!r}")
        raise UnsupportedModelError(f"{where} (model_type {mtype!r}) is not supported: {ROTARY_REASON}; missing: "
                                    f"{missing}. Supported: {SUPPORTED}")
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
