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


class Weighted(torch.utils.data.Sampler):
    """A user's sampler drawing with torch's global generator, with repeats (as PyG's
    ImbalancedSampler does): 30 draws from 10 positions, position 9 ten times as likely."""

    def __init__(self):
        self.weights = torch.ones(10)
        self.weights[9] = 10.0

    def __len__(self):
        return 30

    def __iter__(self):
        return iter(torch.multinomial(self.weights, 30, replacement=True).tolist())


def test_own_sampler_draw_is_common_to_ranks_and_strided_over_them():
    ranks = [ShardSampler(r, 2, 5, shuffle=False, source=Weighted()) for r in range(2)]
    assert not any(s.sharded for s in ranks)           # unsharded until an epoch trains
    torch.manual_seed(0)
    whole = [list(s) for s in ranks]                   # an evaluation epoch: the whole draw
    torch.manual_seed(1)                               # ranks' global RNG states differ
    assert whole[0] == whole[1] and len(whole[0]) == 30
    for s in ranks:
        s.sharded = True
        assert len(s) == 15
    torch.manual_seed(2)
    part0 = list(ranks[0])
    torch.manual_seed(3)
    part1 = list(ranks[1])
    draw = ranks[0].permutation(1).tolist()            # epoch 1 again, on its own
    assert part0 == draw[0::2] and part1 == draw[1::2]
    assert draw != whole[0]                            # a new draw every epoch
    assert draw.count(9) > 10                          # the sampler's weights, not uniform


def test_own_sampler_unsharded_epoch_is_the_whole_draw_unpadded():
    """31 draws over 2 ranks: an evaluation epoch yields the 31, not the 32 a sharded epoch
    is padded to."""
    class Odd(Weighted):
        def __len__(self):
            return 31

        def __iter__(self):
            return iter(torch.multinomial(self.weights, 31, replacement=True).tolist())

    s = ShardSampler(0, 2, 5, shuffle=False, source=Odd())
    assert len(list(s)) == len(s) == 31
    s.sharded = True
    assert len(list(s)) == len(s) == 16


def test_own_sampler_leaves_the_global_generator_as_it_was():
    s = ShardSampler(0, 2, 5, shuffle=False, source=Weighted())
    torch.manual_seed(4)
    expected = torch.rand(3)
    torch.manual_seed(4)
    list(s)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("n, p, head, sharded", [(97, 2, 10, True), (50, 3, 12, True),
                                                 (40, 2, 16, False), (5, 2, 8, True)])
def test_an_epoch_split_after_its_head_draws_the_unsplit_epochs_positions(n, p, head, sharded):
    # the head pass: the permutation's first positions in every rank; the second pass: the
    # rest, strided over the ranks (padded by wrap-around over the rest) or whole; the next
    # epoch is the unsplit sampler's next epoch
    plain = ShardSampler(0, 1, 7)
    plain.num_items = n
    want = [plain.permutation(0).tolist(), plain.permutation(1).tolist()]
    passes = []
    for r in range(p):
        s = ShardSampler(r, p, 7)
        s.num_items, s.sharded, s.head = n, sharded, head
        assert len(s) == min(head, n)
        first = list(s)
        assert len(s) == (-(-(n - len(first)) // p) if sharded else n - len(first))
        rest = list(s)
        s.sharded = False
        passes.append((first, rest, list(s)))
    for first, rest, following in passes:
        assert first == want[0][:head]
        assert following == want[1]   # the split epoch counted once
    drawn = [i for _, rest, _ in passes for i in rest] if sharded else passes[0][1]
    if sharded:
        assert sorted(set(drawn)) == sorted(want[0][head:])
        assert len(drawn) == -(-(n - min(head, n)) // p) * p if n > head else not drawn
    else:
        assert drawn == want[0][head:]


def test_closing_an_epoch_whose_second_pass_never_ran():
    s = ShardSampler(0, 2, 7)
    s.num_items, s.head = 30, 8
    first = list(s)
    s.close_epoch()
    s.sharded = False
    plain = ShardSampler(0, 1, 7)
    plain.num_items = 30
    assert first == plain.permutation(0).tolist()[:8]
    assert list(s) == plain.permutation(1).tolist()
