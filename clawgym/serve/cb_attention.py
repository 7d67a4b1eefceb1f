"""Per-sequence attention for continuous batching on CPU (a `transformers serve` patch)."""

from __future__ import annotations

from clawgym.serve.compat import require_transformers

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

# ---- per-sequence attention for continuous batching on CPU ------------------------------------------------------
# transformers' continuous batching packs every sequence of a step into one row ([1, heads, all queries, head_dim])
# and, with `sdpa` (the only CB attention on a CPU without flash-attn), attends all queries of the step to all keys
# of the step through a block-diagonal mask, after `repeat_kv` copies the keys and values for every query head. A
# decode step of N streams with L-token contexts then costs O(N * N * L) attention work and O(N * L * heads) copies,
# instead of O(N * L): at 16 rollout-shaped streams (~300-token prompts) that was about half of every decode step.
# `cb_sdpa_attention` computes the same attention per sequence, using the `cu_seq_lens_q` / `cu_seq_lens_k`
# boundaries CB passes to every attention call: the one-token (decode) queries of a step in one padded batched SDPA
# call (each sequence only sees its own keys; grouped query heads packed, no copies per head), the multi-token
# (prefill) chunks one call each (causal, or CB's own mask block when a chunk continues a cached prefix). Anything
# else (no CB boundaries, sliding windows, sinks, softcap, dropout, non-causal modules) goes to transformers' own
# sdpa function.
# It is installed with transformers' public extension point, `AttentionInterface.register("sdpa", ...)`, in the
# server process only (`python clawgym/serve/launcher.py serve ...`, see `launcher._launch`).

_CB_DECODE_INDEX: dict = {}  # (cu_q, cu_k) of the step -> padded gather index; reused by every layer of the step


def _decode_index(cu_q: tuple, cu_k: tuple, device, torch):
    hit = _CB_DECODE_INDEX.get((cu_q, cu_k, device))
    if hit is not None:
        return hit
    rows = [i for i in range(len(cu_q) - 1) if cu_q[i + 1] - cu_q[i] == 1]
    if rows:
        q_pos = torch.tensor([cu_q[i] for i in rows], device=device)
        starts = torch.tensor([cu_k[i] for i in rows], device=device)
        lens = torch.tensor([cu_k[i + 1] - cu_k[i] for i in rows], device=device)
        ar = torch.arange(max(cu_k[i + 1] - cu_k[i] for i in rows), device=device)
        gather = (starts[:, None] + torch.minimum(ar[None, :], lens[:, None] - 1)).reshape(-1)
        valid = (ar[None, :] < lens[:, None])[:, None, None, :]  # [B, 1, 1, Lmax]
        contiguous = q_pos.numel() == cu_q[-1]  # every query of the step is a decode query
        hit = (rows, q_pos, gather, valid, contiguous)
    else:
        hit = (rows, None, None, None, False)
    _CB_DECODE_INDEX.clear()
    _CB_DECODE_INDEX[(cu_q, cu_k, device)] = hit
    return hit


def cb_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                      **kwargs):
    """Drop-in for transformers' ``sdpa`` attention function (same signature and output [1, queries, heads, dim])."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    padded = kwargs.pop(_PADDED_KV, None)  # set by `cb_cache_update` when every query of the step is a decode token
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if padded is not None:
        kp, vp, valid = padded
        b, kv_heads, _, dim = kp.shape
        heads = query.shape[1]
        if query.shape[0] == 1 and query.shape[2] == b and heads % kv_heads == 0 and not dropout and not (
                kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
                or hasattr(module, "sinks") or getattr(module, "sliding_window", None)
                or not getattr(module, "is_causal", True)):
            q = query[0].transpose(0, 1).reshape(b, kv_heads, heads // kv_heads, dim)
            o = torch.nn.functional.scaled_dot_product_attention(q, kp, vp, attn_mask=valid, scale=scaling)
            return o.reshape(1, b, heads, dim), None
        # anything unusual: unpad to the flat [1, kv_heads, keys, dim] layout and take the general path below
        keep = valid.reshape(-1)
        key, value = (x.transpose(1, 2).reshape(-1, kv_heads, x.shape[-1])[keep].transpose(0, 1).unsqueeze(0)
                      for x in (kp, vp))
    if (not isinstance(cu_q, torch.Tensor) or not isinstance(cu_k, torch.Tensor) or query.shape[0] != 1
            or dropout or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
            or hasattr(module, "sinks") or getattr(module, "sliding_window", None)
            or not getattr(module, "is_causal", True)
            or key.shape[-1] != value.shape[-1] or query.shape[1] % key.shape[1]):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    qs, ks = tuple(cu_q.tolist()), tuple(cu_k.tolist())
    _, heads, n_q, dim = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    rows, q_pos, gather, valid, all_decode = _decode_index(qs, ks, query.device, torch)
    if rows:
        k_flat, v_flat = key[0].transpose(0, 1), value[0].transpose(0, 1)  # [keys, kv_heads, dim], views
        b, l_max = valid.shape[0], valid.shape[-1]
        kp = k_flat.index_select(0, gather).view(b, l_max, kv_heads, dim).transpose(1, 2)
        vp = v_flat.index_select(0, gather).view(b, l_max, kv_heads, dim).transpose(1, 2)
        q = query[0].index_select(1, q_pos).transpose(0, 1).reshape(b, kv_heads, rep, dim)
        o = sdpa(q, kp, vp, attn_mask=valid, scale=scaling).reshape(b, heads, dim)
        if all_decode:
            return o.unsqueeze(0), None
    out = query.new_empty(n_q, heads, dim)
    if rows:
        out.index_copy_(0, q_pos, o)
    for i in range(len(qs) - 1):
        q0, q1, k0, k1 = qs[i], qs[i + 1], ks[i], ks[i + 1]
        if q1 - q0 <= 1:
            continue
        q, k, v = query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1]
        if q1 - q0 == k1 - k0:
            o = sdpa(q, k, v, is_causal=True, scale=scaling, enable_gqa=rep > 1)
        else:  # a chunk after cached tokens: causal, aligned bottom-right
            mask = attention_mask[..., q0:q1, k0:k1] if attention_mask is not None else (
                torch.arange(k1 - k0, device=query.device)[None, :]
                <= torch.arange(q1 - q0, device=query.device)[:, None] + (k1 - k0 - (q1 - q0)))
            o = sdpa(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=rep > 1)
        out[q0:q1] = o[0].transpose(0, 1)
    return out.unsqueeze(0), None


_PADDED_KV = "_clawgym_padded_kv"
_STOCK_CACHE_UPDATE = None


def cb_cache_update(self, key_states, value_states, layer_idx: int, kwargs: dict):
    """`PagedAttentionCache.update` that reads a decode-only step's keys and values from the cache once.

    Stock CB reads every sequence's cached keys and values of the layer into one flat tensor (`index_select` with
    the step's read index), and the per-sequence attention then gathered them a second time into a padded
    [sequences, kv_heads, longest context, dim] batch. When every query of the step is a decode token, this reads
    the padded batch straight from the cache (the read index composed with the padded gather: one copy instead of
    two) and hands it to `cb_sdpa_attention` in the layer's kwargs; the flat keys and values are never built.
    Every other step (prefill, mixed, sliding-window or block-table layers, another attention function) runs
    transformers' own update."""
    import torch
    from transformers.generation.continuous_batching.cache_allocators.full_attention import (
        FullAttentionCacheAllocator,
    )
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    allocator = self.layer_to_allocator[layer_idx]
    cu_q, cu_k, read_index = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k"), kwargs.get("read_index")
    if (type(allocator) is not FullAttentionCacheAllocator or kwargs.get("block_table") is not None
            or not isinstance(cu_q, torch.Tensor) or not isinstance(cu_k, dict) or read_index is None
            or getattr(self.config, "_attn_implementation", None) != "sdpa"
            or ALL_ATTENTION_FUNCTIONS.get("sdpa") is not cb_sdpa_attention
            or key_states.shape[0] != 1 or key_states.shape[2] != cu_q.numel() - 1):  # not one query per sequence
        return _STOCK_CACHE_UPDATE(self, key_states, value_states, layer_idx, kwargs)
    read = read_index[allocator.index]
    if read.numel() == 0:
        return _STOCK_CACHE_UPDATE(self, key_states, value_states, layer_idx, kwargs)
    kwargs["cu_seq_lens_k"] = cu_k = cu_k[allocator.layer_type].to(torch.int32)
    kwargs["max_length_k"] = kwargs["max_length_k"][allocator.layer_type]
    k_cache, v_cache = allocator._kv_token_views[layer_idx]  # [cache tokens, kv_heads, dim]
    write = kwargs["write_index"][allocator.index]
    k_new, v_new = (x.squeeze(0).transpose(0, 1) for x in (key_states, value_states))
    k_cache.index_copy_(0, write, k_new)
    v_cache.index_copy_(0, write, v_new)
    rows, _, gather, valid, _ = _decode_index(tuple(cu_q.tolist()), tuple(cu_k.tolist()), key_states.device, torch)
    b, l_max = valid.shape[0], valid.shape[-1]
    slots = read.index_select(0, gather)
    kp, vp = (c.index_select(0, slots).view(b, l_max, c.shape[1], c.shape[2]).transpose(1, 2)
              for c in (k_cache, v_cache))
    kwargs[_PADDED_KV] = (kp, vp, valid)
    return key_states, value_states  # not read by cb_sdpa_attention when the padded batch is there


def install_cb_attention() -> None:
    """Route transformers' ``sdpa`` attention through `cb_sdpa_attention` in this process, and CB's cache reads
    of decode-only steps through `cb_cache_update`."""
    require_transformers(__name__, TRANSFORMERS_VERSION)
    global _STOCK_CACHE_UPDATE
    from transformers import AttentionInterface
    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    AttentionInterface.register("sdpa", cb_sdpa_attention)
    if _STOCK_CACHE_UPDATE is None:
        _STOCK_CACHE_UPDATE = PagedAttentionCache.update
        PagedAttentionCache.update = cb_cache_update


def uninstall_cb_attention() -> None:
    """Undo `install_cb_attention` (tests)."""
    global _STOCK_CACHE_UPDATE
    from transformers import AttentionInterface
    from transformers.generation.continuous_batching.cache import PagedAttentionCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("sdpa", sdpa_attention_forward)
    if _STOCK_CACHE_UPDATE is not None:
        PagedAttentionCache.update, _STOCK_CACHE_UPDATE = _STOCK_CACHE_UPDATE, None


