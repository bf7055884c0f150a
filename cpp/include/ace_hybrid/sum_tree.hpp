// B-ary reduction trees over a fixed number of leaves: a sum tree (double) for proportional sampling and a max
// tree (float) for "new items get the current maximum priority".
//
// Layout (kFanout = 16 children per node, any number of leaves, not only powers of the fanout):
//
//     level 2 (root)   [ r ]                                   size 1
//     level 1          [ n0 | n1 | ... ]                       size ceil(n / 16)
//     level 0 (leaves) [ l0 l1 ... l15 | l16 ... l31 | ... ]   size n
//
//   node j of level k combines children [16 j, min(16 j + 16, size(k-1))) of level k-1. All levels live in one
//   contiguous vector (leaves first), so the tree is stored as one array and can be saved and restored bit for bit.
//   Sixteen doubles are two cache lines, so a descent touches ~2 lines per level and the internal nodes cost only
//   1/15 of the leaf storage (0.53 bytes per leaf for doubles), which keeps the replay's per-transition overhead low.
//
// Exactness instead of drift: an update never adds a delta to its ancestors; it recomputes each ancestor as the
// combination of its (at most 16) children, in a fixed order. The internal nodes are therefore always a pure,
// deterministic function of the leaves (the tree equals a fresh rebuild() bit for bit, which check() verifies), so
// floating-point drift cannot accumulate however many updates are made. The fixed order of a sum node is four
// interleaved partial sums, ((c0 + c4 + c8 + c12) + (c1 + c5 + ...)) + ((c2 + ...) + (c3 + ...)), which has a
// dependency chain of 6 additions instead of 15 and vectorises. A max node is exact in any order, so the max tree
// stops climbing as soon as a node's value is unchanged (most updates touch one or two levels). The cost is
// O(16 log16 n) per sum update, i.e. ~80 additions for a million leaves. rebuild() is still provided (O(n)) for
// bulk loads, and updates_since_rebuild() counts updates for diagnostics.
//
// Batched descent: find_batch() walks all queries down together, one level at a time, prefetching each query's
// child block a few queries ahead, so the cache misses of a batch overlap instead of forming one serial chain per
// query (the leaf level of a 1M-leaf tree is 8 MB and misses the cache on nearly every query).
//
// Thread safety: none; the owner (MixedReplay) guards every tree with its mutex.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "memory.hpp"

namespace ace_hybrid {

struct SumOp {
    template <typename T>
    static T combine(T a, T b) { return a + b; }
    template <typename T>
    static constexpr T identity() { return T(0); }
};

struct MaxOp {
    template <typename T>
    static T combine(T a, T b) { return a < b ? b : a; }
    template <typename T>
    static constexpr T identity() { return T(0); }  // trees hold non-negative values only
};

template <typename T, typename Op>
class BTree {
public:
    static constexpr std::size_t kFanout = 16;

    BTree() : BTree(1) {}

    // n >= 1 leaves, all zero. O(n) memory: n * (1 + 1/15 + ...) values.
    explicit BTree(std::size_t n) { resize(n); }

    void resize(std::size_t n) {
        if (n == 0) throw std::invalid_argument("tree needs at least one leaf");
        offsets_.clear();
        sizes_.clear();
        std::size_t total = 0, level = n;
        while (true) {
            offsets_.push_back(total);
            sizes_.push_back(level);
            total += level;
            if (level == 1) break;
            level = (level + kFanout - 1) / kFanout;
        }
        data_.assign(total, Op::template identity<T>());
        updates_ = 0;
    }

    std::size_t size() const { return sizes_[0]; }
    std::size_t levels() const { return sizes_.size(); }
    // All nodes, leaves first then each level up to the root; used by save/load.
    std::vector<T, HugePageAllocator<T>>& data() { return data_; }
    const std::vector<T, HugePageAllocator<T>>& data() const { return data_; }
    std::size_t node_count() const { return data_.size(); }
    std::size_t nbytes() const { return data_.size() * sizeof(T); }

    T root() const { return data_.back(); }
    T leaf(std::size_t i) const { return data_[i]; }
    const T* leaves() const { return data_.data(); }
    std::uint64_t updates_since_rebuild() const { return updates_; }

    // Sets leaf i and recomputes its ancestors from their children. O(16 log16 n) for a sum tree; a max tree stops
    // at the first ancestor whose value does not change (O(16) typically). i must be < size() (checked by the
    // caller; this is an internal API).
    void set(std::size_t i, T value) {
        ++updates_;
        if constexpr (std::is_same_v<Op, MaxOp>) {
            set_max(i, value);
        } else {
            data_[i] = value;
            std::size_t child = i;
            for (std::size_t k = 1; k < sizes_.size(); ++k) {
                const std::size_t parent = child / kFanout;
                data_[offsets_[k] + parent] = combine_children(k, parent);
                child = parent;
            }
        }
    }

    // set() for many leaves: leaf[i] = value[i] in order (a repeated leaf ends with its last value), then every
    // ancestor of a set leaf is recomputed once per level, bottom-up. Equal to the same sequence of set() calls
    // bit for bit (the internal nodes are a function of the leaves), but a node shared by several leaves is
    // recomputed once and the recomputations of one level are independent (no dependency chain from one update
    // to the next). Adjacent repeats are merged, so sorted leaves (a sampled batch) share the most work.
    // O(n 16 log16 size()) at worst.
    void set_many(const std::size_t* leaf, const T* value, std::size_t n) {
        if (n == 0) return;
        updates_ += n;
        if constexpr (std::is_same_v<Op, MaxOp>) {
            for (std::size_t i = 0; i < n; ++i) set_max(leaf[i], value[i]);
        } else {
            for (std::size_t i = 0; i < n; ++i) data_[leaf[i]] = value[i];
            touched_.assign(leaf, leaf + n);
            std::size_t m = n;
            for (std::size_t k = 1; k < sizes_.size(); ++k) {
                std::size_t w = 0;  // merge adjacent repeats of the parents, in place
                for (std::size_t i = 0; i < m; ++i) {
                    const std::size_t parent = touched_[i] / kFanout;
                    if (w == 0 || touched_[w - 1] != parent) touched_[w++] = parent;
                }
                m = w;
                T* level = data_.data() + offsets_[k];
                for (std::size_t i = 0; i < m; ++i) level[touched_[i]] = combine_children(k, touched_[i]);
            }
        }
    }

    // Recomputes every internal node from the leaves. O(n).
    void rebuild() {
        for (std::size_t k = 1; k < sizes_.size(); ++k)
            for (std::size_t j = 0; j < sizes_[k]; ++j) data_[offsets_[k] + j] = combine_children(k, j);
        updates_ = 0;
    }

    // True iff every internal node equals the combination of its children, bit for bit. O(n).
    bool check() const {
        for (std::size_t k = 1; k < sizes_.size(); ++k)
            for (std::size_t j = 0; j < sizes_[k]; ++j)
                if (!(data_[offsets_[k] + j] == combine_children(k, j))) return false;
        return true;
    }

    // Sum tree only: the leaf whose cumulative interval contains u, for 0 <= u < root(). Rounding can leave u at
    // or past the sum of a node's children; then the last child with a positive value is taken, so the result is
    // always a leaf with a positive value when root() > 0. O(16 log16 n).
    std::size_t find(double u) const {
        std::size_t node = 0;  // index within the current level
        for (std::size_t k = sizes_.size() - 1; k > 0; --k) node = descend(k, node, u);
        return node;
    }

    // find() for n queries at once: leaf[i] = find(u[i]) for i < n, bit for bit. u is used as scratch (its values
    // are consumed). All queries descend one level at a time with the child blocks of later queries prefetched,
    // so cache misses overlap (memory-level parallelism); sorted queries (stratified sampling) also share the
    // upper levels. O(n 16 log16 size()).
    void find_batch(double* u, std::size_t* leaf, std::size_t n) const {
        constexpr std::size_t kAhead = 8;  // queries between a prefetch and its use
        std::fill(leaf, leaf + n, std::size_t(0));
        for (std::size_t k = sizes_.size() - 1; k > 0; --k) {
            const T* c = data_.data() + offsets_[k - 1];
            const std::size_t below = sizes_[k - 1];
            for (std::size_t i = 0; i < n; ++i) {
                if (i + kAhead < n) prefetch_block(c, leaf[i + kAhead] * kFanout, below);
                leaf[i] = descend(k, leaf[i], u[i]);
            }
        }
    }

    // Prefetches the children of node j of level k (k >= 1) for a coming find / set. O(1).
    ACE_HYBRID_ALWAYS_INLINE void prefetch_children(std::size_t k, std::size_t j) const {
        prefetch_block(data_.data() + offsets_[k - 1], j * kFanout, sizes_[k - 1]);
    }

private:
    // Index of the lowest / highest set bit of x != 0.
    static std::size_t lowest_set_bit(unsigned x) {
#if defined(__GNUC__) || defined(__clang__)
        return static_cast<std::size_t>(__builtin_ctz(x));
#else
        std::size_t i = 0;
        while (!(x & 1u)) x >>= 1, ++i;
        return i;
#endif
    }
    static std::size_t highest_set_bit(unsigned x) {
#if defined(__GNUC__) || defined(__clang__)
        return static_cast<std::size_t>(31 - __builtin_clz(x));
#else
        std::size_t i = 0;
        while (x >>= 1) ++i;
        return i;
#endif
    }

    // One step of find(): the child of node j (level k) whose interval holds u; u becomes the offset within it.
    std::size_t descend(std::size_t k, std::size_t j, double& u) const {
        const std::size_t lo = j * kFanout;
        const std::size_t hi = std::min(lo + kFanout, sizes_[k - 1]);
        const T* c = data_.data() + offsets_[k - 1];
        if (hi - lo == kFanout) {
            // Branch-free form of the loop below (same comparisons and subtractions, so the same result): the
            // exit branch of the loop is unpredictable and costs more than scanning all 16 children.
            const T* b = c + lo;
            double r[kFanout + 1];
            unsigned hits = 0, positive = 0;
            r[0] = u;
            for (std::size_t i = 0; i < kFanout; ++i) {
                const double v = static_cast<double>(b[i]);
                hits |= static_cast<unsigned>(r[i] < v) << i;
                positive |= static_cast<unsigned>(v > 0.0) << i;
                r[i + 1] = r[i] - v;
            }
            if (hits != 0) {
                const std::size_t chosen = lowest_set_bit(hits);
                u = r[chosen];
                return lo + chosen;
            }
            const std::size_t last = positive ? highest_set_bit(positive) : 0;
            u = static_cast<double>(b[last]);
            return lo + last;
        }
        std::size_t last_positive = lo;
        for (std::size_t i = lo; i < hi; ++i) {
            const double v = static_cast<double>(c[i]);
            if (v > 0.0) last_positive = i;
            if (u < v) return i;
            u -= v;
        }
        u = static_cast<double>(c[last_positive]);  // past the end: keep descending along the right edge
        return last_positive;
    }

    ACE_HYBRID_ALWAYS_INLINE static void prefetch_block(const T* level, std::size_t lo, std::size_t size) {
        if (lo < size) prefetch_bytes(level + lo, (std::min(lo + kFanout, size) - lo) * sizeof(T));
    }

    // The combination of the children of node j of level k, in the fixed order described in the header comment.
    T combine_children(std::size_t k, std::size_t j) const {
        const std::size_t lo = j * kFanout;
        const std::size_t hi = std::min(lo + kFanout, sizes_[k - 1]);
        const T* c = data_.data() + offsets_[k - 1] + lo;
        if constexpr (std::is_same_v<Op, SumOp>) {
            static_assert(kFanout % 4 == 0, "the interleaved sum needs a fanout divisible by 4");
            T a[4] = {T(0), T(0), T(0), T(0)};
            if (hi - lo == kFanout) {
                for (std::size_t i = 0; i < kFanout; i += 4)
                    for (std::size_t l = 0; l < 4; ++l) a[l] += c[i + l];
            } else {
                for (std::size_t i = 0; i < hi - lo; ++i) a[i % 4] += c[i];
            }
            return (a[0] + a[1]) + (a[2] + a[3]);
        } else {
            T acc = Op::template identity<T>();
            for (std::size_t i = 0; i < hi - lo; ++i) acc = Op::combine(acc, c[i]);
            return acc;
        }
    }

    // Max tree: sets leaf i and climbs only while a node's maximum changes. A node whose child went from `old` to
    // `value` has the new maximum `value` if value >= its old maximum m (every other child is <= m); it is
    // unchanged if old < m (the maximum is another child's); otherwise (the maximum was this child and fell) it
    // is recomputed from its children. The result equals a rebuild exactly: max is order-independent.
    void set_max(std::size_t i, T value) {
        T old = data_[i];
        data_[i] = value;
        std::size_t child = i;
        for (std::size_t k = 1; k < sizes_.size() && !(old == value); ++k) {
            const std::size_t parent = child / kFanout;
            T& m = data_[offsets_[k] + parent];
            T fresh;
            if (!(value < m))
                fresh = value;
            else if (old < m)
                return;
            else
                fresh = combine_children(k, parent);
            old = m;
            m = fresh;
            value = fresh;
            child = parent;
        }
    }

    std::vector<T, HugePageAllocator<T>> data_;
    std::vector<std::size_t> offsets_;
    std::vector<std::size_t> sizes_;
    std::vector<std::size_t> touched_;  // scratch for set_many()
    std::uint64_t updates_ = 0;
};

using SumTree = BTree<double, SumOp>;
using MaxTree = BTree<float, MaxOp>;

}  // namespace ace_hybrid
