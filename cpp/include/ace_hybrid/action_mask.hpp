// Action -> grid element incidence ("footprint", CSR) and the per-observation legality mask of Grid2Op's rules.
//
// A footprint says, for every action of a discrete catalog, what Grid2Op's BaseAction.get_topological_impact
// looks at:
//
//   action a
//    |- substation entries  [sub_ptr[a], sub_ptr[a+1])      substations whose elements get a bus (> 0) set
//    |     entry e: sub_idx[e]                              the substation
//    |              sub_sets_other[e]                       1 if a load / generator / storage unit of it is set
//    |              sub_line_idx[sub_line_ptr[e] .. +1)     lines one of whose ends at that substation is set
//    |- status entries      [status_ptr[a], status_ptr[a+1]) lines whose status is set
//          status_idx[k], status_val[k] in {-1, +1}         (disconnect / reconnect)
//
// A bus-assignment action is one substation entry; a line-status action one status entry; do-nothing is empty.
// Catalogs are concatenations of these (ActionFootprint::concatenate).
//
// Grid2Op's rules (DefaultRules = LookParam + PreventDiscoStorageModif + PreventReconnection; RulesByArea) applied
// to an action with such a footprint, for line status `status` (connected = 1):
//   impacted lines = lines whose status is set (whatever the current status; +1 on a connected line counts)
//                  + lines with a set end that are disconnected (setting a bus reconnects them)
//   impacted subs  = substation entries with a set load/gen/storage, or with a set end of a *connected* line
//                    (ends of disconnected lines count as a line status change, not a substation change)
//   legal iff  #impacted lines per area <= max_line_status_changed, #impacted subs per area <= max_sub_changed,
//              cooldown_line == 0 on every impacted line and cooldown_sub == 0 on every impacted substation.
// PreventDiscoStorageModif never rejects these actions (they set no storage power). Grid2Op's RulesChecker also
// declares everything legal while env.nb_time_step <= 0 (right after reset): that is the caller's business.
//
// Legality depends only on the footprint, and many actions share one (all bus assignments of a substation do):
// the masker evaluates each distinct footprint ("group") once per observation and fills runs of consecutive
// actions of the same group with memset.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ace_hybrid {

namespace detail {
inline void check_csr(const std::vector<std::int64_t>& ptr, std::size_t n_rows, std::size_t n_items, const char* name) {
    if (ptr.size() != n_rows + 1) {
        std::ostringstream os;
        os << name << " must have " << n_rows + 1 << " entries, got " << ptr.size();
        throw std::invalid_argument(os.str());
    }
    if (ptr[0] != 0) {
        std::ostringstream os;
        os << name << "[0] = " << ptr[0] << " must be 0";
        throw std::invalid_argument(os.str());
    }
    for (std::size_t i = 0; i < n_rows; ++i) {
        if (ptr[i + 1] < ptr[i]) {
            std::ostringstream os;
            os << name << " must be non-decreasing: " << name << "[" << i + 1 << "] = " << ptr[i + 1] << " < "
               << name << "[" << i << "] = " << ptr[i];
            throw std::invalid_argument(os.str());
        }
    }
    if (static_cast<std::uint64_t>(ptr[n_rows]) != n_items) {
        std::ostringstream os;
        os << name << "[-1] = " << ptr[n_rows] << " must equal the number of items " << n_items;
        throw std::invalid_argument(os.str());
    }
}

inline void check_ids(const std::vector<std::int32_t>& ids, std::int32_t hi, const char* name) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= hi) {
            std::ostringstream os;
            os << name << "[" << i << "] = " << ids[i] << " out of range [0, " << hi << ")";
            throw std::out_of_range(os.str());
        }
    }
}
}  // namespace detail

// Immutable after construction; every const method is thread-safe.
class ActionFootprint {
   public:
    ActionFootprint() = default;

    // Builds a footprint from its CSR parts (see the picture at the top of this file) and validates it:
    // pointers start at 0, never decrease and end at the item count; substation ids in [0, n_sub), line ids in
    // [0, n_line); no substation twice in one action, no line twice among one action's status entries; status
    // values in {-1, +1}. Throws std::invalid_argument / std::out_of_range naming the offending value.
    // Cost O(n_actions + n_items) plus O(n_groups log n_groups) to find the distinct footprints.
    ActionFootprint(std::int32_t n_sub, std::int32_t n_line, std::vector<std::int64_t> sub_ptr,
                    std::vector<std::int32_t> sub_idx, std::vector<std::uint8_t> sub_sets_other,
                    std::vector<std::int64_t> sub_line_ptr, std::vector<std::int32_t> sub_line_idx,
                    std::vector<std::int64_t> status_ptr, std::vector<std::int32_t> status_idx,
                    std::vector<std::int8_t> status_val)
        : n_sub_(n_sub),
          n_line_(n_line),
          sub_ptr_(std::move(sub_ptr)),
          sub_idx_(std::move(sub_idx)),
          sub_sets_other_(std::move(sub_sets_other)),
          sub_line_ptr_(std::move(sub_line_ptr)),
          sub_line_idx_(std::move(sub_line_idx)),
          status_ptr_(std::move(status_ptr)),
          status_idx_(std::move(status_idx)),
          status_val_(std::move(status_val)) {
        if (n_sub_ < 0 || n_line_ < 0) {
            std::ostringstream os;
            os << "n_sub = " << n_sub_ << " and n_line = " << n_line_ << " must be >= 0";
            throw std::invalid_argument(os.str());
        }
        if (sub_ptr_.empty()) throw std::invalid_argument("sub_ptr must have n_actions + 1 >= 1 entries, got 0");
        const std::size_t n = sub_ptr_.size() - 1;
        detail::check_csr(sub_ptr_, n, sub_idx_.size(), "sub_ptr");
        if (sub_sets_other_.size() != sub_idx_.size()) {
            std::ostringstream os;
            os << "sub_sets_other has " << sub_sets_other_.size() << " entries, sub_idx has " << sub_idx_.size();
            throw std::invalid_argument(os.str());
        }
        for (auto& v : sub_sets_other_) v = v ? 1 : 0;
        detail::check_csr(sub_line_ptr_, sub_idx_.size(), sub_line_idx_.size(), "sub_line_ptr");
        detail::check_csr(status_ptr_, n, status_idx_.size(), "status_ptr");
        if (status_val_.size() != status_idx_.size()) {
            std::ostringstream os;
            os << "status_val has " << status_val_.size() << " entries, status_idx has " << status_idx_.size();
            throw std::invalid_argument(os.str());
        }
        detail::check_ids(sub_idx_, n_sub_, "sub_idx");
        detail::check_ids(sub_line_idx_, n_line_, "sub_line_idx");
        detail::check_ids(status_idx_, n_line_, "status_idx");
        for (std::size_t k = 0; k < status_val_.size(); ++k) {
            if (status_val_[k] != 1 && status_val_[k] != -1) {
                std::ostringstream os;
                os << "status_val[" << k << "] = " << static_cast<int>(status_val_[k]) << " must be -1 or +1";
                throw std::invalid_argument(os.str());
            }
        }
        // No duplicate substation / status line inside one action (markers hold the last action that used them).
        std::vector<std::int64_t> seen_sub(static_cast<std::size_t>(n_sub_), -1), seen_line(n_line_, -1);
        for (std::size_t a = 0; a < n; ++a) {
            for (std::int64_t e = sub_ptr_[a]; e < sub_ptr_[a + 1]; ++e) {
                const auto s = static_cast<std::size_t>(sub_idx_[e]);
                if (seen_sub[s] == static_cast<std::int64_t>(a)) {
                    std::ostringstream os;
                    os << "action " << a << " lists substation " << s << " twice";
                    throw std::invalid_argument(os.str());
                }
                seen_sub[s] = static_cast<std::int64_t>(a);
            }
            for (std::int64_t k = status_ptr_[a]; k < status_ptr_[a + 1]; ++k) {
                const auto l = static_cast<std::size_t>(status_idx_[k]);
                if (seen_line[l] == static_cast<std::int64_t>(a)) {
                    std::ostringstream os;
                    os << "action " << a << " sets the status of line " << l << " twice";
                    throw std::invalid_argument(os.str());
                }
                seen_line[l] = static_cast<std::int64_t>(a);
            }
        }
        build_derived();
    }

    // n copies of the empty footprint (do-nothing). O(n).
    static ActionFootprint do_nothing(std::int32_t n_sub, std::int32_t n_line, std::int64_t count = 1) {
        if (count < 0) {
            std::ostringstream os;
            os << "count = " << count << " must be >= 0";
            throw std::invalid_argument(os.str());
        }
        return ActionFootprint(n_sub, n_line, std::vector<std::int64_t>(static_cast<std::size_t>(count) + 1, 0), {},
                               {}, {0}, {}, std::vector<std::int64_t>(static_cast<std::size_t>(count) + 1, 0), {},
                               {});
    }

    // One action per (line_ids[k], values[k]): set the status of that line to values[k] in {-1, +1}. O(n).
    static ActionFootprint line_status(std::int32_t n_sub, std::int32_t n_line, const std::vector<std::int32_t>& line_ids,
                                       const std::vector<std::int8_t>& values) {
        if (line_ids.size() != values.size()) {
            std::ostringstream os;
            os << "line_ids has " << line_ids.size() << " entries, values has " << values.size();
            throw std::invalid_argument(os.str());
        }
        const std::size_t n = line_ids.size();
        std::vector<std::int64_t> status_ptr(n + 1);
        for (std::size_t i = 0; i <= n; ++i) status_ptr[i] = static_cast<std::int64_t>(i);
        return ActionFootprint(n_sub, n_line, std::vector<std::int64_t>(n + 1, 0), {}, {}, {0}, {},
                               std::move(status_ptr), line_ids, values);
    }

    // The actions of `parts` one after the other (all parts must share n_sub and n_line). O(total size).
    static ActionFootprint concatenate(const std::vector<const ActionFootprint*>& parts) {
        if (parts.empty()) throw std::invalid_argument("concatenate needs at least one footprint");
        const std::int32_t n_sub = parts[0]->n_sub_, n_line = parts[0]->n_line_;
        std::vector<std::int64_t> sub_ptr{0}, sub_line_ptr{0}, status_ptr{0};
        std::vector<std::int32_t> sub_idx, sub_line_idx, status_idx;
        std::vector<std::uint8_t> other;
        std::vector<std::int8_t> status_val;
        for (std::size_t p = 0; p < parts.size(); ++p) {
            const ActionFootprint& f = *parts[p];
            if (f.n_sub_ != n_sub || f.n_line_ != n_line) {
                std::ostringstream os;
                os << "footprint " << p << " has (n_sub, n_line) = (" << f.n_sub_ << ", " << f.n_line_
                   << "), footprint 0 has (" << n_sub << ", " << n_line << ")";
                throw std::invalid_argument(os.str());
            }
            const std::int64_t sub_base = static_cast<std::int64_t>(sub_idx.size());
            const std::int64_t line_base = static_cast<std::int64_t>(sub_line_idx.size());
            const std::int64_t status_base = static_cast<std::int64_t>(status_idx.size());
            for (std::size_t a = 1; a < f.sub_ptr_.size(); ++a) {
                sub_ptr.push_back(sub_base + f.sub_ptr_[a]);
                status_ptr.push_back(status_base + f.status_ptr_[a]);
            }
            for (std::size_t e = 1; e < f.sub_line_ptr_.size(); ++e) sub_line_ptr.push_back(line_base + f.sub_line_ptr_[e]);
            sub_idx.insert(sub_idx.end(), f.sub_idx_.begin(), f.sub_idx_.end());
            other.insert(other.end(), f.sub_sets_other_.begin(), f.sub_sets_other_.end());
            sub_line_idx.insert(sub_line_idx.end(), f.sub_line_idx_.begin(), f.sub_line_idx_.end());
            status_idx.insert(status_idx.end(), f.status_idx_.begin(), f.status_idx_.end());
            status_val.insert(status_val.end(), f.status_val_.begin(), f.status_val_.end());
        }
        return ActionFootprint(n_sub, n_line, std::move(sub_ptr), std::move(sub_idx), std::move(other),
                               std::move(sub_line_ptr), std::move(sub_line_idx), std::move(status_ptr),
                               std::move(status_idx), std::move(status_val));
    }

    std::int64_t n_actions() const { return static_cast<std::int64_t>(sub_ptr_.size()) - 1; }
    std::int32_t n_sub() const { return n_sub_; }
    std::int32_t n_line() const { return n_line_; }
    const std::vector<std::int64_t>& sub_ptr() const { return sub_ptr_; }
    const std::vector<std::int32_t>& sub_idx() const { return sub_idx_; }
    const std::vector<std::uint8_t>& sub_sets_other() const { return sub_sets_other_; }
    const std::vector<std::int64_t>& sub_line_ptr() const { return sub_line_ptr_; }
    const std::vector<std::int32_t>& sub_line_idx() const { return sub_line_idx_; }
    const std::vector<std::int64_t>& status_ptr() const { return status_ptr_; }
    const std::vector<std::int32_t>& status_idx() const { return status_idx_; }
    const std::vector<std::int8_t>& status_val() const { return status_val_; }
    // Per action, the distinct lines one of whose ends gets a bus (sorted), CSR.
    const std::vector<std::int64_t>& bus_line_ptr() const { return bus_line_ptr_; }
    const std::vector<std::int32_t>& bus_line_idx() const { return bus_line_idx_; }
    // Distinct footprints: group_of[a] in [0, n_groups); actions of one group are always equally legal.
    std::int32_t n_groups() const { return static_cast<std::int32_t>(g_sub_ptr_.size()) - 1; }
    const std::vector<std::int32_t>& group_of() const { return group_of_; }

   private:
    friend class LegalityMasker;

    // Per group, flattened for the masker:
    //   g_line_ptr/g_line/g_line_always   distinct lines it may impact; always = status set (else: only if disconnected)
    //   g_sub_ptr/g_sub/g_sub_other        its substation entries, with g_subline_ptr/g_subline their set line ends
    void build_derived() {
        const std::size_t n = static_cast<std::size_t>(n_actions());
        bus_line_ptr_.assign(1, 0);
        bus_line_idx_.clear();
        std::vector<std::int32_t> tmp;
        for (std::size_t a = 0; a < n; ++a) {
            tmp.clear();
            for (std::int64_t e = sub_ptr_[a]; e < sub_ptr_[a + 1]; ++e)
                for (std::int64_t k = sub_line_ptr_[e]; k < sub_line_ptr_[e + 1]; ++k) tmp.push_back(sub_line_idx_[k]);
            std::sort(tmp.begin(), tmp.end());
            tmp.erase(std::unique(tmp.begin(), tmp.end()), tmp.end());
            bus_line_idx_.insert(bus_line_idx_.end(), tmp.begin(), tmp.end());
            bus_line_ptr_.push_back(static_cast<std::int64_t>(bus_line_idx_.size()));
        }

        // Group key: [n_entries, (sub, other, n_lines, lines...)*, n_status, (line, val)*]; an identical footprint
        // gives an identical key. Consecutive actions usually share it, so compare with the previous key first.
        std::map<std::vector<std::int64_t>, std::int32_t> groups;
        std::vector<std::int64_t> key, prev_key;
        std::int32_t prev_group = -1;
        group_of_.assign(n, 0);
        g_sub_ptr_.assign(1, 0);
        g_subline_ptr_.assign(1, 0);
        g_line_ptr_.assign(1, 0);
        g_sub_.clear();
        g_sub_other_.clear();
        g_subline_.clear();
        g_line_.clear();
        g_line_always_.clear();
        for (std::size_t a = 0; a < n; ++a) {
            key.clear();
            key.push_back(sub_ptr_[a + 1] - sub_ptr_[a]);
            for (std::int64_t e = sub_ptr_[a]; e < sub_ptr_[a + 1]; ++e) {
                key.push_back(sub_idx_[e]);
                key.push_back(sub_sets_other_[e]);
                key.push_back(sub_line_ptr_[e + 1] - sub_line_ptr_[e]);
                for (std::int64_t k = sub_line_ptr_[e]; k < sub_line_ptr_[e + 1]; ++k) key.push_back(sub_line_idx_[k]);
            }
            key.push_back(status_ptr_[a + 1] - status_ptr_[a]);
            for (std::int64_t k = status_ptr_[a]; k < status_ptr_[a + 1]; ++k) {
                key.push_back(status_idx_[k]);
                key.push_back(status_val_[k]);
            }
            if (prev_group >= 0 && key == prev_key) {
                group_of_[a] = prev_group;
                continue;
            }
            auto it = groups.find(key);
            std::int32_t g;
            if (it != groups.end()) {
                g = it->second;
            } else {
                g = n_groups();
                groups.emplace(key, g);
                add_group(a);
            }
            group_of_[a] = g;
            prev_group = g;
            prev_key.swap(key);
        }
        run_start_.clear();
        run_group_.clear();
        for (std::size_t a = 0; a < n; ++a) {
            if (a == 0 || group_of_[a] != group_of_[a - 1]) {
                run_start_.push_back(static_cast<std::int64_t>(a));
                run_group_.push_back(group_of_[a]);
            }
        }
        run_start_.push_back(static_cast<std::int64_t>(n));
    }

    void add_group(std::size_t a) {
        for (std::int64_t e = sub_ptr_[a]; e < sub_ptr_[a + 1]; ++e) {
            g_sub_.push_back(sub_idx_[e]);
            g_sub_other_.push_back(sub_sets_other_[e]);
            for (std::int64_t k = sub_line_ptr_[e]; k < sub_line_ptr_[e + 1]; ++k) g_subline_.push_back(sub_line_idx_[k]);
            g_subline_ptr_.push_back(static_cast<std::int64_t>(g_subline_.size()));
        }
        g_sub_ptr_.push_back(static_cast<std::int64_t>(g_sub_.size()));
        // Distinct candidate lines; a line both status-set and bus-set is "always" impacted.
        std::vector<std::pair<std::int32_t, std::uint8_t>> lines;
        for (std::int64_t k = status_ptr_[a]; k < status_ptr_[a + 1]; ++k) lines.emplace_back(status_idx_[k], 1);
        for (std::int64_t k = bus_line_ptr_[a]; k < bus_line_ptr_[a + 1]; ++k) lines.emplace_back(bus_line_idx_[k], 0);
        std::sort(lines.begin(), lines.end(), [](const auto& x, const auto& y) {
            return x.first != y.first ? x.first < y.first : x.second > y.second;
        });
        std::int32_t last = -1;
        for (const auto& [l, always] : lines) {
            if (l == last) continue;  // the first of equal ids carries always = 1 if any does
            g_line_.push_back(l);
            g_line_always_.push_back(always);
            last = l;
        }
        g_line_ptr_.push_back(static_cast<std::int64_t>(g_line_.size()));
    }

    std::int32_t n_sub_ = 0, n_line_ = 0;
    std::vector<std::int64_t> sub_ptr_{0};
    std::vector<std::int32_t> sub_idx_;
    std::vector<std::uint8_t> sub_sets_other_;
    std::vector<std::int64_t> sub_line_ptr_{0};
    std::vector<std::int32_t> sub_line_idx_;
    std::vector<std::int64_t> status_ptr_{0};
    std::vector<std::int32_t> status_idx_;
    std::vector<std::int8_t> status_val_;
    // derived
    std::vector<std::int64_t> bus_line_ptr_{0};
    std::vector<std::int32_t> bus_line_idx_;
    std::vector<std::int32_t> group_of_;
    std::vector<std::int64_t> run_start_{0};
    std::vector<std::int32_t> run_group_;
    std::vector<std::int64_t> g_sub_ptr_{0}, g_subline_ptr_{0}, g_line_ptr_{0};
    std::vector<std::int32_t> g_sub_, g_subline_, g_line_;
    std::vector<std::uint8_t> g_sub_other_, g_line_always_;
};

// Limits of Grid2Op's rules. One area (all zeros) is DefaultRules; several areas are RulesByArea (limits apply
// to each area separately; Grid2Op puts a line in the area of its origin substation).
struct LegalityRules {
    std::int32_t max_sub_changed = 1;           // Parameters.MAX_SUB_CHANGED
    std::int32_t max_line_status_changed = 1;   // Parameters.MAX_LINE_STATUS_CHANGED
    bool check_limits = true;                   // LookParam / RulesByArea counting
    bool check_cooldowns = true;                // PreventReconnection
    std::vector<std::int32_t> sub_area;         // (n_sub,) area of each substation, empty = all 0
    std::vector<std::int32_t> line_area;        // (n_line,) area of each line, empty = all 0
};

// Immutable after construction; mask / mask_batch are const and thread-safe (scratch is local).
class LegalityMasker {
   public:
    // Copies the footprint and the rules; validates limits >= 0 and area ids (throws std::invalid_argument /
    // std::out_of_range). O(n_actions + n_sub + n_line).
    LegalityMasker(ActionFootprint footprint, LegalityRules rules) : fp_(std::move(footprint)), rules_(std::move(rules)) {
        if (rules_.max_sub_changed < 0 || rules_.max_line_status_changed < 0) {
            std::ostringstream os;
            os << "max_sub_changed = " << rules_.max_sub_changed
               << " and max_line_status_changed = " << rules_.max_line_status_changed << " must be >= 0";
            throw std::invalid_argument(os.str());
        }
        if (rules_.sub_area.empty()) rules_.sub_area.assign(static_cast<std::size_t>(fp_.n_sub()), 0);
        if (rules_.line_area.empty()) rules_.line_area.assign(static_cast<std::size_t>(fp_.n_line()), 0);
        if (rules_.sub_area.size() != static_cast<std::size_t>(fp_.n_sub())) {
            std::ostringstream os;
            os << "sub_area has " << rules_.sub_area.size() << " entries, expected n_sub = " << fp_.n_sub();
            throw std::invalid_argument(os.str());
        }
        if (rules_.line_area.size() != static_cast<std::size_t>(fp_.n_line())) {
            std::ostringstream os;
            os << "line_area has " << rules_.line_area.size() << " entries, expected n_line = " << fp_.n_line();
            throw std::invalid_argument(os.str());
        }
        const std::int32_t cap = std::max<std::int32_t>(fp_.n_sub(), 1);  // areas partition the substations
        detail::check_ids(rules_.sub_area, cap, "sub_area");
        detail::check_ids(rules_.line_area, cap, "line_area");
        n_area_ = 1;
        for (auto v : rules_.sub_area) n_area_ = std::max(n_area_, v + 1);
        for (auto v : rules_.line_area) n_area_ = std::max(n_area_, v + 1);
    }

    const ActionFootprint& footprint() const { return fp_; }
    const LegalityRules& rules() const { return rules_; }
    std::int64_t n_actions() const { return fp_.n_actions(); }
    std::int32_t n_area() const { return n_area_; }

    // Legality of every group for one observation: out_group[g] for g < n_groups.
    // line_status: (n_line,) 1 = connected; cooldown_line: (n_line,) >= 0; cooldown_sub: (n_sub,) >= 0
    // (values are trusted: the binding validates them). Cost O(size of the distinct footprints).
    void group_mask(const std::uint8_t* line_status, const std::int32_t* cooldown_line, const std::int32_t* cooldown_sub,
                    bool* out_group) const {
        std::vector<std::int32_t> line_count(static_cast<std::size_t>(n_area_), 0), sub_count(line_count);
        std::vector<std::int32_t> touched;
        const std::int32_t n_groups = fp_.n_groups();
        for (std::int32_t g = 0; g < n_groups; ++g) {
            bool legal = true;
            touched.clear();
            for (std::int64_t k = fp_.g_line_ptr_[g]; k < fp_.g_line_ptr_[g + 1] && legal; ++k) {
                const std::int32_t l = fp_.g_line_[k];
                if (!fp_.g_line_always_[k] && line_status[l]) continue;  // reconnection only if disconnected
                if (rules_.check_cooldowns && cooldown_line[l] > 0) legal = false;
                const std::int32_t ar = rules_.line_area[l];
                touched.push_back(ar);
                if (rules_.check_limits && ++line_count[ar] > rules_.max_line_status_changed) legal = false;
            }
            for (std::int64_t e = fp_.g_sub_ptr_[g]; e < fp_.g_sub_ptr_[g + 1] && legal; ++e) {
                bool impacted = fp_.g_sub_other_[e] != 0;
                for (std::int64_t k = fp_.g_subline_ptr_[e]; k < fp_.g_subline_ptr_[e + 1] && !impacted; ++k)
                    impacted = line_status[fp_.g_subline_[k]] != 0;
                if (!impacted) continue;
                const std::int32_t s = fp_.g_sub_[e];
                if (rules_.check_cooldowns && cooldown_sub[s] > 0) legal = false;
                const std::int32_t ar = rules_.sub_area[s];
                touched.push_back(ar);
                if (rules_.check_limits && ++sub_count[ar] > rules_.max_sub_changed) legal = false;
            }
            for (auto ar : touched) line_count[ar] = sub_count[ar] = 0;
            out_group[g] = legal;
        }
    }

    // Legality of every action for one observation into out (n_actions,). Same inputs as group_mask.
    // Cost O(distinct footprints + number of runs of equal footprints) plus a memset of n_actions bytes.
    void mask(const std::uint8_t* line_status, const std::int32_t* cooldown_line, const std::int32_t* cooldown_sub,
              bool* out) const {
        std::unique_ptr<bool[]> legal(new bool[static_cast<std::size_t>(fp_.n_groups()) + 1]);
        group_mask(line_status, cooldown_line, cooldown_sub, legal.get());
        const auto& starts = fp_.run_start_;
        for (std::size_t r = 0; r + 1 < starts.size(); ++r) {
            std::memset(out + starts[r], legal[static_cast<std::size_t>(fp_.run_group_[r])] ? 1 : 0,
                        static_cast<std::size_t>(starts[r + 1] - starts[r]));
        }
    }

    // B observations, row-major: line_status (B, n_line), cooldown_line (B, n_line), cooldown_sub (B, n_sub),
    // out (B, n_actions). Cost B x mask().
    void mask_batch(std::int64_t batch, const std::uint8_t* line_status, const std::int32_t* cooldown_line,
                    const std::int32_t* cooldown_sub, bool* out) const {
        const std::int64_t nl = fp_.n_line(), ns = fp_.n_sub(), na = fp_.n_actions();
        for (std::int64_t b = 0; b < batch; ++b)
            mask(line_status + b * nl, cooldown_line + b * nl, cooldown_sub + b * ns, out + b * na);
    }

   private:
    ActionFootprint fp_;
    LegalityRules rules_;
    std::int32_t n_area_ = 1;
};

}  // namespace ace_hybrid
