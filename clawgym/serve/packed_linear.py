"""Pre-packed oneDNN linear layers on CPU (a patch of `torch.nn.Linear.forward`, server process only)."""

from __future__ import annotations

from clawgym.serve.compat import require_torch

TORCH_VERSION = "2.13.0"  # the torch release whose private oneDNN operators this module calls (see compat)

# ---- pre-packed oneDNN linear layers on CPU ----------------------------------------------------------------------
# fp32 `F.linear` on CPU is an MKL sgemm that re-packs the weight matrix on every call. At the shapes of decoding
# (a handful of token rows against a 576 x 1536 or 49152 x 576 weight) that packing is a large share of the call,
# and MKL's kernels on this AMD host scale poorly past small M: `python benchmarks/linear_kernels.py` prints the
# ratios. oneDNN (torch's mkldnn backend, the kernels inductor's CPU freezing pass uses for linear layers) can pack a
# weight once into its blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and reuse it every call
# (`torch.ops.mkldnn._linear_pointwise`). `install_packed_linear` routes `nn.Linear.forward` through that in the
# server process, for inference only (fp32 on CPU, no autograd); the packed copy is keyed by the weight's storage
# and version, so a reloaded or edited weight is packed again. Anything else (GPU, other dtypes, training, an op
# the torch build lacks) runs the stock forward. Results agree with MKL's to float32 rounding (~1e-6 relative).

_PACKED = "_clawgym_packed_weight"
_STOCK_LINEAR_FORWARD = None


def _packable(torch) -> bool:
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def packed_linear_forward(self, input):
    """`nn.Linear.forward` with the weight packed once for oneDNN (see above)."""
    import torch

    w = self.weight
    if (input.device.type != "cpu" or w.device.type != "cpu" or input.dtype != torch.float32
            or w.dtype != torch.float32 or w.is_sparse or input.is_sparse or input.numel() == 0
            or (torch.is_grad_enabled() and (w.requires_grad or input.requires_grad))
            or self.__dict__.get(_PACKED) is False):
        return _STOCK_LINEAR_FORWARD(self, input)
    key = (w.data_ptr(), w._version, tuple(w.shape))
    hit = self.__dict__.get(_PACKED)
    if hit is None or hit[0] != key:
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
        except RuntimeError:
            self.__dict__[_PACKED] = False  # this build or layout cannot: stock forward from now on
            return _STOCK_LINEAR_FORWARD(self, input)
        hit = self.__dict__[_PACKED] = (key, packed)
    bias = self.bias.detach() if self.bias is not None else None
    return torch.ops.mkldnn._linear_pointwise(input, hit[1], bias, "none", [], "")


def install_packed_linear() -> bool:
    """Route `nn.Linear.forward` through `packed_linear_forward` in this process; False where oneDNN is missing."""
    require_torch(__name__, TORCH_VERSION)
    global _STOCK_LINEAR_FORWARD
    import torch

    if not _packable(torch):
        return False
    if _STOCK_LINEAR_FORWARD is None:
        _STOCK_LINEAR_FORWARD = torch.nn.Linear.forward
        torch.nn.Linear.forward = packed_linear_forward
    return True


def uninstall_packed_linear() -> None:
    """Undo `install_packed_linear` (tests); packed copies left on modules are ignored by the stock forward."""
    global _STOCK_LINEAR_FORWARD
    import torch

    if _STOCK_LINEAR_FORWARD is not None:
        torch.nn.Linear.forward, _STOCK_LINEAR_FORWARD = _STOCK_LINEAR_FORWARD, None


