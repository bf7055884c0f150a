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
// floating-point drift cannot accumulate however many updates are made. The cost is O(16 log16 n) per update
// instead of O(log n) additions, i.e. ~80 additions for a million leaves. rebuild() is still provided (O(n)) for
// bulk loads, and updates_since_rebuild() counts updates for diagnostics.
//
// Thread safety: none; the owner (MixedReplay) guards every tree with its mutex.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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
    std::vector<T>& data() { return data_; }
    const std::vector<T>& data() const { return data_; }
    std::size_t node_count() const { return data_.size(); }
    std::size_t nbytes() const { return data_.size() * sizeof(T); }

    T root() const { return data_.back(); }
    T leaf(std::size_t i) const { return data_[i]; }
    const T* leaves() const { return data_.data(); }
    std::uint64_t updates_since_rebuild() const { return updates_; }

    // Sets leaf i and recomputes its ancestors from their children. O(16 log16 n). i must be < size() (checked
    // by the caller; this is an internal API).
    void set(std::size_t i, T value) {
        data_[i] = value;
        propagate(i);
    }

    // Sets leaf i without touching ancestors; call propagate(i) (or rebuild()) afterwards. O(1).
    void set_leaf_only(std::size_t i, T value) { data_[i] = value; }

    // Recomputes the ancestors of leaf i. O(16 log16 n).
    void propagate(std::size_t i) {
        ++updates_;
        std::size_t child = i;
        for (std::size_t k = 1; k < sizes_.size(); ++k) {
            const std::size_t parent = child / kFanout;
            data_[offsets_[k] + parent] = combine_children(k, parent);
            child = parent;
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
        for (std::size_t k = sizes_.size() - 1; k > 0; --k) {
            const std::size_t lo = node * kFanout;
            const std::size_t hi = std::min(lo + kFanout, sizes_[k - 1]);
            const T* c = data_.data() + offsets_[k - 1];
            std::size_t chosen = hi;
            std::size_t last_positive = lo;
            for (std::size_t j = lo; j < hi; ++j) {
                const double v = static_cast<double>(c[j]);
                if (v > 0.0) last_positive = j;
                if (u < v) {
                    chosen = j;
                    break;
                }
                u -= v;
            }
            if (chosen == hi) {
                chosen = last_positive;
                u = static_cast<double>(c[chosen]);  // past the end: keep descending along the right edge
            }
            node = chosen;
        }
        return node;
    }

private:
    T combine_children(std::size_t k, std::size_t j) const {
        const std::size_t lo = j * kFanout;
        const std::size_t hi = std::min(lo + kFanout, sizes_[k - 1]);
        const T* c = data_.data() + offsets_[k - 1];
        T acc = Op::template identity<T>();
        for (std::size_t i = lo; i < hi; ++i) acc = Op::combine(acc, c[i]);
        return acc;
    }

    std::vector<T> data_;
    std::vector<std::size_t> offsets_;
    std::vector<std::size_t> sizes_;
    std::uint64_t updates_ = 0;
};

using SumTree = BTree<double, SumOp>;
using MaxTree = BTree<float, MaxOp>;

}  // namespace ace_hybrid
