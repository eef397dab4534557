"""ShardSampler: equal shards, full cover, and global batches equal to one process's batches."""
import pytest
import torch

from gnnorch.intercept.loader import ShardSampler


def shards(n, p, seed=7):
    out = []
    for r in range(p):
        s = ShardSampler(r, p, seed)
        s.num_items = n
        out.append(list(s))
    return out


@pytest.mark.parametrize("n, p", [(10, 2), (11, 2), (100, 3), (1, 2), (5, 4)])
def test_equal_lengths_and_cover(n, p):
    parts = shards(n, p)
    assert all(len(part) == -(-n // p) for part in parts)
    seen = [i for part in parts for i in part]
    assert set(seen) == set(range(n))                  # every seed trained each epoch
    assert len(seen) - n == (-n) % p                   # padding only to a multiple of p


def test_global_batches_equal_single_process_batches():
    n, p, b = 97, 2, 10
    parts = shards(n, p)
    single = ShardSampler(0, 1, 7)
    single.num_items = n
    perm = single.permutation(0).tolist()
    per_rank = b // p
    for k in range(len(parts[0]) // per_rank):
        together = sorted(i for part in parts for i in part[k * per_rank:(k + 1) * per_rank])
        assert together == sorted(perm[k * b:(k + 1) * b])


def test_reshuffled_every_epoch_and_common_to_ranks():
    a, b = ShardSampler(0, 2, 3), ShardSampler(1, 2, 3)
    a.num_items = b.num_items = 50
    e0a, e0b, e1a = list(a), list(b), list(a)
    assert e0a != e1a
    assert not set(e0a) & set(e0b)


def test_rank_out_of_range():
    with pytest.raises(ValueError, match="rank must be in"):
        ShardSampler(2, 2, 0)
