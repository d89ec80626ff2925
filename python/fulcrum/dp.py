"""Splitting a global batch's samples over DP ranks with the plugin's partition."""

from .errors import FulcrumError


def split_samples(balancer, samples=None, dp_size=None, *, lengths=None, strategy="auto",
                  cost="tokens", equal_count=False):
    """Splits ``samples`` (anything with len(), e.g. token lists or tensors whose
    first dimension is the sequence) or just their ``lengths`` over ``dp_size``
    ranks. Returns (per-rank lists, DpPartition): the lists hold the samples
    themselves when given, else the sample indices."""
    if dp_size is None:
        raise FulcrumError("invalid_argument", "dp_size is missing; give the number of DP ranks")
    if lengths is None:
        if samples is None:
            raise FulcrumError("invalid_argument", "give samples, lengths or both")
        lengths = [len(s) for s in samples]
    elif samples is not None and len(samples) != len(lengths):
        raise FulcrumError("invalid_argument", f"{len(samples)} samples but {len(lengths)} "
                           "lengths; give one length per sample")
    part = balancer.partition_dp(lengths, dp_size, strategy, cost=cost, equal_count=equal_count)
    if samples is None:
        return [r.tolist() for r in part.ranks], part
    return [[samples[i] for i in r] for r in part.ranks], part
