"""Splitting a global batch's samples over DP ranks with the plugin's partition."""

from ._input_file import shown
from .errors import FulcrumError


def split_samples(balancer, samples=None, dp_size=None, *, lengths=None, strategy="auto",
                  cost="tokens", equal_count=False):
    """Splits ``samples`` (anything with len(), e.g. token lists or tensors whose
    first dimension is the sequence) or just their ``lengths`` over ``dp_size``
    ranks. Returns (per-rank lists, DpPartition): the lists hold the samples
    themselves when given, else the sample indices."""
    if dp_size is None:
        raise FulcrumError("invalid_argument", "dp_size is missing; give the number of DP ranks")
    if samples is not None and not (hasattr(samples, "__len__")
                                    and hasattr(samples, "__getitem__")):
        raise FulcrumError("invalid_argument", f"samples is {shown(samples, 60)}; give a sequence "
                           "(list, tuple, array) of samples")
    if lengths is None:
        if samples is None:
            raise FulcrumError("invalid_argument", "give samples, lengths or both")
        lengths = []
        for i, s in enumerate(samples):
            try:
                lengths.append(len(s))
            except TypeError:
                raise FulcrumError("invalid_argument", f"sample {i} is {shown(s, 60)}, which has "
                                   "no len(); give samples with a length, or their lengths="
                                   "[...]") from None
    elif samples is not None:
        try:
            count = len(lengths)
        except TypeError:
            count = None
        if count != len(samples):
            raise FulcrumError("invalid_argument", f"{len(samples)} samples but lengths is "
                               f"{shown(lengths, 60)}; give one length per sample")
    part = balancer.partition_dp(lengths, dp_size, strategy, cost=cost, equal_count=equal_count)
    if samples is None:
        return [r.tolist() for r in part.ranks], part
    return [[samples[i] for i in r] for r in part.ranks], part
