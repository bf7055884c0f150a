// Enumeration of every single-substation bus-assignment ("set_bus") action of a grid, as Grid2Op's
// SerializableActionSpace.get_all_unitary_topologies_set does it (same set, same order), but in C++.
//
// Layout. Grid2Op's topology vector holds the substations one after the other; element j of substation s (its
// "to_sub_pos") sits at topo position sub_start[s] + j:
//
//   topo vect:  | sub 0: j=0 .. sub_info[0]-1 | sub 1: ... | ... |      sub_start = exclusive cumsum(sub_info)
//
// Enumeration at substation s with n = sub_info[s] elements and K = n_busbar_per_sub busbars: every vector
// t in {1..K}^n with, as Grid2Op requires,
//   - t[0] = 1, and bus labels in order of first use (a "restricted growth string": t[i] <= max(t[0..i-1]) + 1),
//     so each partition of the elements into at most K buses appears once;
//   - every used bus holds at least one line end (no load / generator left alone on a bus);
//   - if add_alone_line is false, every used bus holds at least two elements;
// listed in lexicographic order (Grid2Op's itertools.product order); the all-on-bus-1 vector is included. A
// substation with fewer than 2 such vectors contributes none. K = 1 gives no action at all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ace_hybrid/action_mask.hpp"

namespace ace_hybrid {

enum class ElementKind : std::int8_t { kLoad = 0, kGen = 1, kLineOr = 2, kLineEx = 3, kStorage = 4 };

inline const char* element_kind_name(ElementKind k) {
    switch (k) {
        case ElementKind::kLoad: return "load";
        case ElementKind::kGen: return "gen";
        case ElementKind::kLineOr: return "line_or";
        case ElementKind::kLineEx: return "line_ex";
        case ElementKind::kStorage: return "storage";
    }
    return "?";
}

// Which element sits where. Immutable after construction; const methods are thread-safe.
class GridLayout {
   public:
    GridLayout() = default;

    // Element-to-substation ids and positions inside the substation (Grid2Op's *_to_subid, *_to_sub_pos), per
    // kind. Validates: sub_info >= 0, equal lengths per kind, ids in [0, n_sub), positions in [0, sub_info[sub]),
    // every (substation, position) held by exactly one element. Throws std::invalid_argument / std::out_of_range.
    // Cost O(dim_topo).
    GridLayout(std::vector<std::int32_t> sub_info, const std::vector<std::int32_t>& load_sub,
               const std::vector<std::int32_t>& load_pos, const std::vector<std::int32_t>& gen_sub,
               const std::vector<std::int32_t>& gen_pos, const std::vector<std::int32_t>& line_or_sub,
               const std::vector<std::int32_t>& line_or_pos, const std::vector<std::int32_t>& line_ex_sub,
               const std::vector<std::int32_t>& line_ex_pos, const std::vector<std::int32_t>& storage_sub,
               const std::vector<std::int32_t>& storage_pos)
        : sub_info_(std::move(sub_info)) {
        n_sub_ = static_cast<std::int32_t>(sub_info_.size());
        sub_start_.assign(sub_info_.size() + 1, 0);
        std::int64_t total = 0;
        for (std::size_t s = 0; s < sub_info_.size(); ++s) {
            if (sub_info_[s] < 0) {
                std::ostringstream os;
                os << "sub_info[" << s << "] = " << sub_info_[s] << " must be >= 0";
                throw std::invalid_argument(os.str());
            }
            total += sub_info_[s];
            if (total > (std::int64_t{1} << 30)) throw std::invalid_argument("sum(sub_info) exceeds 2**30 elements");
            sub_start_[s + 1] = static_cast<std::int32_t>(total);
        }
        dim_topo_ = static_cast<std::int32_t>(total);
        topo_kind_.assign(static_cast<std::size_t>(dim_topo_), -1);
        topo_id_.assign(static_cast<std::size_t>(dim_topo_), -1);
        if (line_or_sub.size() != line_ex_sub.size()) {
            std::ostringstream os;
            os << "line_or_to_subid has " << line_or_sub.size() << " entries, line_ex_to_subid has "
               << line_ex_sub.size();
            throw std::invalid_argument(os.str());
        }
        n_line_ = static_cast<std::int32_t>(line_or_sub.size());
        place(ElementKind::kLoad, load_sub, load_pos, nullptr);
        place(ElementKind::kGen, gen_sub, gen_pos, nullptr);
        place(ElementKind::kLineOr, line_or_sub, line_or_pos, &line_or_topo_);
        place(ElementKind::kLineEx, line_ex_sub, line_ex_pos, &line_ex_topo_);
        place(ElementKind::kStorage, storage_sub, storage_pos, nullptr);
        for (std::int32_t s = 0; s < n_sub_; ++s) {
            for (std::int32_t j = 0; j < sub_info_[s]; ++j) {
                if (topo_kind_[sub_start_[s] + j] < 0) {
                    std::ostringstream os;
                    os << "substation " << s << " position " << j << " holds no element (sub_info[" << s
                       << "] = " << sub_info_[s] << ")";
                    throw std::invalid_argument(os.str());
                }
            }
        }
        line_or_sub_ = line_or_sub;
        line_ex_sub_ = line_ex_sub;
    }

    std::int32_t n_sub() const { return n_sub_; }
    std::int32_t n_line() const { return n_line_; }
    std::int32_t dim_topo() const { return dim_topo_; }
    const std::vector<std::int32_t>& sub_info() const { return sub_info_; }
    // (n_sub + 1,) first topo position of each substation, then dim_topo.
    const std::vector<std::int32_t>& sub_start() const { return sub_start_; }
    // Per topo position: the element kind (ElementKind as int8) and its id within its kind.
    const std::vector<std::int8_t>& topo_kind() const { return topo_kind_; }
    const std::vector<std::int32_t>& topo_id() const { return topo_id_; }
    // Per line, topo position of its origin / extremity (Grid2Op's line_or_pos_topo_vect / line_ex_pos_topo_vect).
    const std::vector<std::int32_t>& line_or_pos_topo_vect() const { return line_or_topo_; }
    const std::vector<std::int32_t>& line_ex_pos_topo_vect() const { return line_ex_topo_; }
    const std::vector<std::int32_t>& line_or_to_subid() const { return line_or_sub_; }
    const std::vector<std::int32_t>& line_ex_to_subid() const { return line_ex_sub_; }

    bool is_line_end(std::int32_t topo_pos) const {
        const auto k = static_cast<ElementKind>(topo_kind_[topo_pos]);
        return k == ElementKind::kLineOr || k == ElementKind::kLineEx;
    }

   private:
    void place(ElementKind kind, const std::vector<std::int32_t>& sub, const std::vector<std::int32_t>& pos,
               std::vector<std::int32_t>* topo_out) {
        const char* name = element_kind_name(kind);
        if (sub.size() != pos.size()) {
            std::ostringstream os;
            os << name << "_to_subid has " << sub.size() << " entries, " << name << "_to_sub_pos has " << pos.size();
            throw std::invalid_argument(os.str());
        }
        if (topo_out) topo_out->assign(sub.size(), -1);
        for (std::size_t i = 0; i < sub.size(); ++i) {
            if (sub[i] < 0 || sub[i] >= n_sub_) {
                std::ostringstream os;
                os << name << "_to_subid[" << i << "] = " << sub[i] << " out of range [0, " << n_sub_ << ")";
                throw std::out_of_range(os.str());
            }
            if (pos[i] < 0 || pos[i] >= sub_info_[sub[i]]) {
                std::ostringstream os;
                os << name << "_to_sub_pos[" << i << "] = " << pos[i] << " out of range [0, " << sub_info_[sub[i]]
                   << ") (sub_info of substation " << sub[i] << ")";
                throw std::out_of_range(os.str());
            }
            const std::int32_t t = sub_start_[sub[i]] + pos[i];
            if (topo_kind_[t] >= 0) {
                std::ostringstream os;
                os << name << " " << i << " and " << element_kind_name(static_cast<ElementKind>(topo_kind_[t])) << " "
                   << topo_id_[t] << " both sit at position " << pos[i] << " of substation " << sub[i];
                throw std::invalid_argument(os.str());
            }
            topo_kind_[t] = static_cast<std::int8_t>(kind);
            topo_id_[t] = static_cast<std::int32_t>(i);
            if (topo_out) (*topo_out)[i] = t;
        }
    }

    std::int32_t n_sub_ = 0, n_line_ = 0, dim_topo_ = 0;
    std::vector<std::int32_t> sub_info_, sub_start_{0};
    std::vector<std::int8_t> topo_kind_;
    std::vector<std::int32_t> topo_id_;
    std::vector<std::int32_t> line_or_topo_, line_ex_topo_, line_or_sub_, line_ex_sub_;
};

struct EnumerationOptions {
    std::int32_t n_busbar_per_sub = 2;     // Grid2Op's n_busbar_per_sub, in [1, 127]
    bool add_alone_line = true;            // Grid2Op's default: a bus may hold a single line end
    std::int64_t max_actions = 20000000;   // refuse to build more (memory guard); ValueError past it
};

// The enumerated actions: per action its substation and its bus pattern (one int8 per element of the
// substation, in position order). Actions are grouped by substation, in substation order. Immutable.
class BusAssignmentActions {
   public:
    BusAssignmentActions() = default;

    // Enumerates (see the top of this file). Cost O(sum over substations of n_actions(s) * sub_info[s]) after
    // pruning (dead branches cut as soon as the line / two-element rules cannot be met any more); < 0.1 s for
    // the 66,810 actions of l2rpn_wcci_2020. Throws std::invalid_argument for n_busbar_per_sub outside [1, 127]
    // or when more than max_actions would be produced.
    BusAssignmentActions(GridLayout layout, const EnumerationOptions& options)
        : layout_(std::move(layout)), options_(options) {
        if (options_.n_busbar_per_sub < 1 || options_.n_busbar_per_sub > 127) {
            std::ostringstream os;
            os << "n_busbar_per_sub = " << options_.n_busbar_per_sub << " out of range [1, 127]";
            throw std::invalid_argument(os.str());
        }
        if (options_.max_actions < 0) {
            std::ostringstream os;
            os << "max_actions = " << options_.max_actions << " must be >= 0";
            throw std::invalid_argument(os.str());
        }
        sub_offsets_.assign(1, 0);
        pattern_offsets_.assign(1, 0);
        for (std::int32_t s = 0; s < layout_.n_sub(); ++s) {
            if (options_.n_busbar_per_sub >= 2) enumerate_sub(s);
            sub_offsets_.push_back(static_cast<std::int64_t>(substation_.size()));
        }
    }

    std::int64_t n_actions() const { return static_cast<std::int64_t>(substation_.size()); }
    const GridLayout& layout() const { return layout_; }
    const EnumerationOptions& options() const { return options_; }
    // (n_actions,) substation of each action.
    const std::vector<std::int32_t>& substation() const { return substation_; }
    // (n_sub + 1,) actions of substation s are [sub_offsets[s], sub_offsets[s+1]).
    const std::vector<std::int64_t>& sub_offsets() const { return sub_offsets_; }
    // Flat bus patterns: action i's pattern is patterns[pattern_offsets[i] .. pattern_offsets[i+1]).
    const std::vector<std::int8_t>& patterns() const { return patterns_; }
    const std::vector<std::int64_t>& pattern_offsets() const { return pattern_offsets_; }

    // Writes action i's set_bus vector into out[0 .. dim_topo): 0 (untouched) outside its substation, its bus
    // pattern inside. i must be in [0, n_actions) (checked by the caller). O(dim_topo). Thread-safe.
    void set_bus(std::int64_t i, std::int8_t* out) const {
        std::memset(out, 0, static_cast<std::size_t>(layout_.dim_topo()));
        const std::int32_t s = substation_[static_cast<std::size_t>(i)];
        const std::int64_t off = pattern_offsets_[static_cast<std::size_t>(i)];
        std::memcpy(out + layout_.sub_start()[s], patterns_.data() + off,
                    static_cast<std::size_t>(pattern_offsets_[static_cast<std::size_t>(i) + 1] - off));
    }

    // The footprint of these actions for the legality masker: one substation entry each (sets a load / gen /
    // storage iff the substation has one; its lines = the lines with an end there, in position order).
    // O(n_actions * max sub_info).
    ActionFootprint footprint() const {
        const std::int32_t n_sub = layout_.n_sub();
        std::vector<std::uint8_t> sub_other(static_cast<std::size_t>(n_sub), 0);
        std::vector<std::vector<std::int32_t>> sub_lines(static_cast<std::size_t>(n_sub));
        for (std::int32_t s = 0; s < n_sub; ++s) {
            for (std::int32_t t = layout_.sub_start()[s]; t < layout_.sub_start()[s + 1]; ++t) {
                if (layout_.is_line_end(t))
                    sub_lines[s].push_back(layout_.topo_id()[t]);
                else
                    sub_other[s] = 1;
            }
        }
        const std::size_t n = substation_.size();
        std::vector<std::int64_t> sub_ptr(n + 1), sub_line_ptr(n + 1, 0), status_ptr(n + 1, 0);
        std::vector<std::int32_t> sub_idx(n), sub_line_idx;
        std::vector<std::uint8_t> other(n);
        for (std::size_t a = 0; a < n; ++a) {
            const std::int32_t s = substation_[a];
            sub_ptr[a] = static_cast<std::int64_t>(a);
            sub_idx[a] = s;
            other[a] = sub_other[s];
            sub_line_idx.insert(sub_line_idx.end(), sub_lines[s].begin(), sub_lines[s].end());
            sub_line_ptr[a + 1] = static_cast<std::int64_t>(sub_line_idx.size());
        }
        sub_ptr[n] = static_cast<std::int64_t>(n);
        return ActionFootprint(n_sub, layout_.n_line(), std::move(sub_ptr), std::move(sub_idx), std::move(other),
                               std::move(sub_line_ptr), std::move(sub_line_idx), std::move(status_ptr), {}, {});
    }

   private:
    // Depth-first over positions 1..n-1 with buses tried in increasing order, so the surviving vectors come out
    // in lexicographic order. State: bus counts, line-end counts per bus, the number of used buses without a
    // line end ("need_line") and the missing elements to reach two per used bus ("deficit").
    struct Dfs {
        std::int32_t n = 0, K = 0;
        bool alone_ok = true;
        std::vector<std::uint8_t> is_line;
        std::vector<std::int32_t> lines_from;  // line ends at positions >= j
        std::vector<std::int8_t> t;
        std::vector<std::int32_t> count, line_count;
        std::int32_t used = 0, need_line = 0, deficit = 0;
        std::vector<std::int8_t>* out = nullptr;
        std::int64_t emitted = 0, budget = 0;
        std::int32_t sub = 0;

        void assign(std::int32_t j, std::int32_t b) {
            t[j] = static_cast<std::int8_t>(b);
            if (b > used) {
                used = b;
                ++need_line;
                deficit += 2;
            }
            if (count[b] < 2) --deficit;
            ++count[b];
            if (is_line[j] && line_count[b]++ == 0) --need_line;
        }
        void unassign(std::int32_t j, std::int32_t b) {
            if (is_line[j] && --line_count[b] == 0) ++need_line;
            --count[b];
            if (count[b] < 2) ++deficit;
            if (count[b] == 0) {  // b was the newest bus (restricted growth), drop it
                used = b - 1;
                --need_line;
                deficit -= 2;
            }
        }
        bool feasible(std::int32_t next) const {  // can positions next..n-1 still satisfy the rules?
            if (need_line > lines_from[next]) return false;
            if (!alone_ok && deficit > n - next) return false;
            return true;
        }
        void run(std::int32_t j) {
            if (j == n) {
                if (need_line == 0 && (alone_ok || deficit == 0)) {
                    if (++emitted > budget) {
                        std::ostringstream os;
                        os << "more than max_actions = " << budget << " actions (reached at substation " << sub
                           << ")";
                        throw std::invalid_argument(os.str());
                    }
                    out->insert(out->end(), t.begin(), t.end());
                }
                return;
            }
            const std::int32_t top = std::min(K, used + 1);
            for (std::int32_t b = 1; b <= top; ++b) {
                assign(j, b);
                if (feasible(j + 1)) run(j + 1);
                unassign(j, b);
            }
        }
    };

    void enumerate_sub(std::int32_t s) {
        const std::int32_t n = layout_.sub_info()[s];
        if (n == 0) return;
        Dfs d;
        d.n = n;
        d.K = options_.n_busbar_per_sub;
        d.alone_ok = options_.add_alone_line;
        d.is_line.resize(static_cast<std::size_t>(n));
        d.lines_from.assign(static_cast<std::size_t>(n) + 1, 0);
        for (std::int32_t j = 0; j < n; ++j) d.is_line[j] = layout_.is_line_end(layout_.sub_start()[s] + j) ? 1 : 0;
        for (std::int32_t j = n - 1; j >= 0; --j) d.lines_from[j] = d.lines_from[j + 1] + d.is_line[j];
        d.t.assign(static_cast<std::size_t>(n), 0);
        d.count.assign(static_cast<std::size_t>(d.K) + 2, 0);
        d.line_count.assign(static_cast<std::size_t>(d.K) + 2, 0);
        std::vector<std::int8_t> buf;
        d.out = &buf;
        d.budget = options_.max_actions - n_actions();
        d.sub = s;
        d.assign(0, 1);
        if (d.feasible(1)) d.run(1);
        const std::int64_t found = static_cast<std::int64_t>(buf.size()) / n;
        if (found < 2) return;  // one topology only: nothing to change (Grid2Op drops it too)
        const std::int64_t base = static_cast<std::int64_t>(patterns_.size());
        patterns_.insert(patterns_.end(), buf.begin(), buf.end());
        for (std::int64_t k = 0; k < found; ++k) {
            substation_.push_back(s);
            pattern_offsets_.push_back(base + (k + 1) * n);
        }
    }

    GridLayout layout_;
    EnumerationOptions options_;
    std::vector<std::int32_t> substation_;
    std::vector<std::int64_t> sub_offsets_{0};
    std::vector<std::int8_t> patterns_;
    std::vector<std::int64_t> pattern_offsets_{0};
};

}  // namespace ace_hybrid
