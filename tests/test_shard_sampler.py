"""ShardSampler: each global batch of one process dealt out over the ranks, every position of
the epoch once, nothing padded; per-rank batch sizes that differ by at most one seed."""
import pytest
import torch

from gnnorch.intercept.loader import ShardSampler


def shards(n, p, seed=7, b=None, drop_last=False):
    out = []
    for r in range(p):
        s = ShardSampler(r, p, seed, batch_size=b, drop_last=drop_last)
        s.num_items = n
        parts = list(s)
        assert len(parts) == len(s)
        out.append(parts)
    return out


@pytest.mark.parametrize("n, p, b", [(10, 2, None), (11, 2, None), (100, 3, None), (1, 2, None),
                                     (5, 4, None), (97, 2, 10), (97, 3, 10), (140, 3, 20),
                                     (7, 3, 2), (50, 4, 7)])
def test_every_position_once_and_equal_batch_counts(n, p, b):
    parts = shards(n, p, b=b)
    size = b or p
    batches = -(-n // size)
    real = []
    for r, part in enumerate(parts):
        s = ShardSampler(r, p, 7, batch_size=b)
        s.num_items = n
        padded = s.padding()
        c = s.rank_batch_size()
        chunks = [part[k * c:(k + 1) * c] for k in range(batches)]
        assert sum(map(len, chunks)) == len(part) and all(chunks)   # one batch a global one
        for k, chunk in enumerate(chunks):
            if padded(k):                   # a duplicate of the global batch's first seed
                assert len(chunk) == 1 and chunk[0] == parts[0][k * parts_size(p, b, 0)]
            else:
                real += chunk
    assert sorted(real) == list(range(n))              # every seed once an epoch


def parts_size(p, b, r):
    return ShardSampler(r, p, 0, batch_size=b).rank_batch_size()


@pytest.mark.parametrize("n, p, b", [(97, 2, 10), (97, 3, 10), (140, 3, 20), (23, 4, 6),
                                     (9, 2, 1), (40, 2, 16), (12, 5, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_per_rank_batches_together_are_one_process_batches(n, p, b, drop_last):
    parts = shards(n, p, b=b, drop_last=drop_last)
    single = ShardSampler(0, 1, 7)
    single.num_items = n
    perm = single.permutation(0).tolist()
    batches = [perm[k:k + b] for k in range(0, n, b)]
    if drop_last and n % b:
        batches = batches[:-1]
    sizes = [ShardSampler(r, p, 7, batch_size=b).rank_batch_size() for r in range(p)]
    assert max(sizes) - min(sizes) <= 1 and sum(min(b, c) for c in sizes) >= b
    for k, want in enumerate(batches):      # a DataLoader chunks rank r's stream by sizes[r]
        together = [i for r in range(p) for i in parts[r][k * sizes[r]:(k + 1) * sizes[r]]
                    if r < len(want)]       # (rank r >= the batch's size: a padding batch)
        assert sorted(together) == sorted(want), k
    for r in range(p):                      # as many batches as one process, nothing after
        assert -(-len(parts[r]) // sizes[r]) == len(batches)


def test_batch_sizes_differ_by_one_and_sum_to_the_batch():
    assert [ShardSampler(r, 3, 0, batch_size=1024).rank_batch_size() for r in range(3)] == \
        [342, 341, 341]
    assert [ShardSampler(r, 2, 0, batch_size=128).rank_batch_size() for r in range(2)] == \
        [64, 64]
    # fewer seeds than ranks: the rank without any keeps a valid batch size, and gets nothing
    assert [ShardSampler(r, 4, 0, batch_size=2).rank_batch_size() for r in range(4)] == \
        [1, 1, 1, 1]
    assert [len(part) for part in shards(10, 4, b=2)] == [5, 5, 5, 5]   # 2 padded: 1 each
    with pytest.raises(ValueError, match="batch_size must be a positive"):
        ShardSampler(0, 2, 0, batch_size=0)


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


def test_own_sampler_unsharded_epoch_is_the_whole_draw():
    """31 draws over 2 ranks: an evaluation epoch yields the 31; a sharded one deals them
    out, 16 and 15 plus one padding position."""
    class Odd(Weighted):
        def __len__(self):
            return 31

        def __iter__(self):
            return iter(torch.multinomial(self.weights, 31, replacement=True).tolist())

    s = ShardSampler(0, 2, 5, shuffle=False, source=Odd())
    assert len(list(s)) == len(s) == 31
    s.sharded = True
    assert len(list(s)) == len(s) == 16
    other = ShardSampler(1, 2, 5, shuffle=False, source=Odd())
    other.sharded = True
    assert len(list(other)) == len(other) == 16
    assert other.padding()(15) and not other.padding()(14)


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
    # rest, dealt out over the ranks (batches of `head` from the head on) or whole; the next
    # epoch is the unsplit sampler's next epoch
    plain = ShardSampler(0, 1, 7)
    plain.num_items = n
    want = [plain.permutation(0).tolist(), plain.permutation(1).tolist()]
    passes = []
    for r in range(p):
        s = ShardSampler(r, p, 7, batch_size=head)
        s.num_items, s.sharded, s.head = n, sharded, head
        assert len(s) == min(head, n)
        first = list(s)
        expected, padded = len(s), s.padding()
        rest = list(s)
        assert len(rest) == expected
        if sharded:   # padding batches (one position each) left out
            c = s.rank_batch_size()
            rest = [i for k in range(-(-len(rest) // c)) if not padded(k)
                    for i in rest[k * c:(k + 1) * c]]
        s.sharded = False
        passes.append((first, rest, list(s)))
    for first, rest, following in passes:
        assert first == want[0][:head]
        assert following == want[1]   # the split epoch counted once
    if sharded:
        drawn = [i for _, rest, _ in passes for i in rest]
        assert sorted(drawn) == sorted(want[0][head:])   # each once, nothing padded
        sizes = [-(-(head - r) // p) for r in range(p)]
        for r, (_, rest, _) in enumerate(passes):       # the rest's batches are global ones
            assert rest[:sizes[r]] == want[0][head + r:2 * head:p]
    else:
        assert passes[0][1] == want[0][head:]


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
