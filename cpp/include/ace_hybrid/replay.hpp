// Mixed prioritised replay for ACE (arXiv 2506.02522, Eq. 8): an RL partition sampled by proportional
// prioritised replay and an LLM partition of refined transitions sampled with probability proportional to
// I_v * exp((r_hat - r) / tau).
//
// Handles. Every stored item gets one int64 handle = (absolute write position << 1) | partition (0 RL, 1 LLM).
// slot = position % capacity and generation = position / capacity. Both partitions are FIFO rings written in
// order, so an item is live iff position >= positions_written - capacity (and, for RL, its slot is a transition
// head). A handle whose slot was overwritten since it was issued is "stale": priority and reward updates skip it.
// A handle must be >= 0, so positions are < 2^62 and each partition's write counter is at most kMaxWritten = 2^62:
// an add that would pass it throws std::overflow_error (storing nothing), load() refuses a larger counter, so no
// handle is ever negative and every saved file loads. (At a billion adds a second, 2^62 takes 146 years: only a
// crafted file comes near it.)
//
// Actions. An action is an int64 >= 0; a buffer built with num_actions = A > 0 also refuses actions >= A, in adds
// and in the files it loads (a replay that does not fit the run's action set).
//
// RL partition layout (the memory-efficient DQN trick: each observation is stored once):
//
//   slot:     k-1          k                 k+1             k+2
//          [ s_t  | a_t ] [ s_t+1 | a_t+1 ] [ s_t+2 | -- ]  [ s'_0 | a'_0 ] ...
//            head          head               pending/terminal next obs (not sampleable)
//
//   A transition lives in the slot holding its observation (its "head") and its next observation is ALWAYS the
//   observation in slot k+1 (mod C). add_rl continues the previous transition when it has the same episode,
//   decision == previous decision + 1, the previous one was neither done nor truncated, and obs is bit-equal
//   (memcmp) to the stored pending next observation: then the transition's fields go into the pending slot and only
//   next_obs is written (one new slot). Otherwise obs goes to a fresh slot and next_obs to the one after (two new
//   slots). Overwriting a slot kills the transition that lived there (its priority becomes 0). A live head at
//   position p has its next observation at p + 1 < positions_written, which cannot have been overwritten while p
//   is live, so no sampled transition is ever paired with a wrong or overwritten next observation. Memory:
//   (1 + 1/L) slots per transition for episodes of length L; a slot costs 4 D bytes of observation plus 37.8 bytes
//   (a 24-byte record of action 8, reward 4, original reward 4, episode 4, decision 4; flags 1; sum-tree leaf 8 +
//   0.53 internal; priority 4 + 0.27 max-tree internal). "decision" is the index of the agent's decision within
//   its episode (the training loop stores one transition per decision, not per environment step). Episode ids and
//   decision indices are stored as int32 and must lie in [0, 2^31 - 1].
//
// LLM partition: a plain ring with its own next_obs column (refined transitions arrive out of order), the
//   improvement r_hat - r (float32) and the validation flag I_v. Its sampling weight is
//   I_v * exp(clip((r_hat - r) / tau, -60, 60)): the clip keeps every weight in [e^-60, e^60] so a sum of up to
//   2^40 of them stays finite in double precision; items with I_v = 0 are never sampled.
//
// Priorities (RL only). The sum-tree leaf of a live head is priority^alpha (alpha = 0 gives 1 for every live
// transition, i.e. uniform sampling, whatever its priority; pow(0, alpha > 0) = 0 means never sampled). Priorities
// are stored as float32 (the max structure's leaves); the leaf is computed from that float32 value. New
// transitions get the current maximum priority over live transitions (a max tree, so it decreases when the top
// items are lowered or overwritten), or 1.0 when no live transition has a positive priority.
//
// Sampling a batch of B. The nominal LLM share is n_nom = B - floor((1 - beta) B + 0.5), i.e. round(beta B) with
// ties going to RL. With K the number of valid live LLM items (each has a positive weight, so K counts exactly the
// sampleable LLM items):
//   - both partitions sampleable (both sums > 0): n_llm = min(n_nom, K) and n_rl = B - n_llm. The LLM partition
//     contributes to every batch from its first valid item on, capped by its item COUNT: a young partition never
//     supplies more rows than it holds items, so a handful of refined transitions is not replayed dozens of times
//     per batch; RL supplies the rest of the batch;
//   - only one partition sampleable (the other empty, all invalid, or all priorities 0): it supplies all B rows;
//   - neither: std::invalid_argument.
//   RL is deliberately not capped the same way: when it holds fewer sampleable transitions than its n_rl rows it
//   still supplies them (drawing items more than once), so the LLM fraction of a batch never exceeds its nominal
//   share while RL holds anything sampleable, and every batch has B rows.
// Each partition draws its rows by stratified sampling over its own total (n strata of width total / n, one
// uniform per stratum; stratum j of the LLM partition may land on the same item as stratum j + 1). RL rows come
// first, then LLM rows. One draw of the batch (a row chosen uniformly) picks item i with probability
// q_i = (n_part / B) * leaf_i / total_part, where n_part is the number of rows its partition actually supplied;
// with N = size() (live RL transitions + valid live LLM items), the importance weight is (N q_i)^-w /
// max_j (N q_j)^-w, normalised by the maximum over THIS batch (N cancels in the normalisation; it is kept in the
// formula for clarity).
//
// Speed (a training step at capacity 1M is bound by cache and TLB misses, at D = 1300 by copying the rows):
//   sample() draws all uniforms, walks both trees down for the whole batch at once (SumTree::find_batch, misses
//   overlapped by prefetching), then copies the rows in slot order, prefetching the observations and scalar
//   record of the rows a few places ahead; update_priorities() finds the live slots first, then sets the max
//   tree item by item (it stops climbing once a node is unchanged) and the sum tree bottom-up once per touched
//   node (SumTree::set_many). The large arrays are allocated on transparent huge pages (memory.hpp).
//
// Thread safety: every public method takes one internal std::mutex, so one writer thread (the actor adding
// transitions) and one or more sampler threads (the learner) may call concurrently. Methods never call back into
// anything that could take another lock. Costs below are per call with the lock held.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "memory.hpp"
#include "replay_io.hpp"
#include "rng.hpp"
#include "sum_tree.hpp"

namespace ace_hybrid {

struct ReplayConfig {
    std::uint64_t obs_dim = 1;
    std::uint64_t rl_capacity = 3;
    std::uint64_t llm_capacity = 1;
    double alpha = 0.6;  // priority exponent, [0, 1]
    double beta = 0.25;  // LLM fraction of a batch, [0, 1]
    double tau = 1.0;    // Eq. 8 temperature, [1e-6, 1e6]
};

// Size limits, checked by the constructor and by load().
constexpr std::uint64_t kMaxObsDim = 1ULL << 24;
constexpr std::uint64_t kMaxCapacity = 1ULL << 40;
constexpr std::uint64_t kMaxObsBytes = 1ULL << 40;  // 4 * obs_dim * (rl_capacity + 2 * llm_capacity)
constexpr std::uint64_t kMaxBatch = 1ULL << 20;
constexpr std::int64_t kMaxEpisodeOrDecision = std::numeric_limits<std::int32_t>::max();
constexpr double kExponentClip = 60.0;
// Positions each partition may write: a handle (position << 1) | partition of a position < 2^62 is in
// [0, 2^63 - 1]. Checked by every add and by load().
constexpr std::uint64_t kMaxWritten = 1ULL << 62;

inline void validate_config(const ReplayConfig& c) {
    auto fail = [](const std::string& s) { throw std::invalid_argument(s); };
    std::ostringstream os;
    if (c.obs_dim < 1 || c.obs_dim > kMaxObsDim) {
        os << "obs_dim = " << c.obs_dim << " out of range [1, " << kMaxObsDim << "]";
        fail(os.str());
    }
    if (c.rl_capacity < 3 || c.rl_capacity > kMaxCapacity) {
        os << "rl_capacity = " << c.rl_capacity << " out of range [3, " << kMaxCapacity << "]";
        fail(os.str());
    }
    if (c.llm_capacity < 1 || c.llm_capacity > kMaxCapacity) {
        os << "llm_capacity = " << c.llm_capacity << " out of range [1, " << kMaxCapacity << "]";
        fail(os.str());
    }
    const long double slots =
        static_cast<long double>(c.rl_capacity) + 2.0L * static_cast<long double>(c.llm_capacity);
    const long double bytes = 4.0L * static_cast<long double>(c.obs_dim) * slots;
    if (bytes > static_cast<long double>(kMaxObsBytes)) {
        os << "observation storage 4 * obs_dim * (rl_capacity + 2 * llm_capacity) = " << static_cast<double>(bytes)
           << " bytes exceeds the limit of " << kMaxObsBytes << " bytes";
        fail(os.str());
    }
    if (!(c.alpha >= 0.0 && c.alpha <= 1.0)) {
        os << "alpha = " << c.alpha << " out of range [0, 1]";
        fail(os.str());
    }
    if (!(c.beta >= 0.0 && c.beta <= 1.0)) {
        os << "beta = " << c.beta << " out of range [0, 1]";
        fail(os.str());
    }
    if (!(c.tau >= 1e-6 && c.tau <= 1e6)) {
        os << "tau = " << c.tau << " out of range [1e-06, 1e+06]";
        fail(os.str());
    }
}

// n transitions, row-major (n, obs_dim) observations. improvement / valid are read by add_llm only.
struct TransitionsIn {
    std::size_t n = 0;
    std::size_t obs_dim = 0;  // the row length the caller laid out; must equal the buffer's obs_dim

    const float* obs = nullptr;
    const std::int64_t* action = nullptr;
    const float* reward = nullptr;
    const float* next_obs = nullptr;
    const bool* done = nullptr;
    const bool* truncated = nullptr;
    const std::int64_t* episode = nullptr;
    const std::int64_t* decision = nullptr;
    const float* improvement = nullptr;
    const bool* valid = nullptr;
};

// Output columns for sample() / get(), each with room for the batch (obs/next_obs: batch * obs_dim floats).
struct BatchOut {
    std::size_t obs_dim;  // the row length the caller allocated; must equal the buffer's obs_dim
    float* obs;
    std::int64_t* action;
    float* reward;
    float* next_obs;
    bool* done;
    bool* truncated;
    float* weight;
    std::int64_t* index;
    bool* from_llm;
    float* original_reward;
    std::int64_t* episode;
    std::int64_t* decision;
    float* improvement;
    bool* valid;
};

// Live RL transitions in write order (oldest first), for the LLM critic to group trajectories.
struct RlColumns {
    std::vector<std::int64_t> index, episode, decision, action;
    std::vector<float> reward, original_reward;
    std::vector<bool> done, truncated;
};

class MixedReplay {
public:
    static constexpr std::uint8_t kDone = 1, kTruncated = 2, kHead = 4, kValid = 8;
    // File format versions (save() writes kFileVersion; load() reads kOldestReadableVersion..kFileVersion):
    //   2: every array at full capacity, sum / max trees with their internal nodes (nodes combined in the
    //      interleaved order of sum_tree.hpp), RL scalars as 24-byte records (rl.scalars).
    //   3: only the written prefix of each partition, slots [0, min(written, capacity)) (the rings are written in
    //      slot order, so that is every slot ever used), and only the tree leaves; load() rebuilds the internal
    //      nodes, which are a pure function of the leaves, so the state is restored bit for bit.
    // Version 1 files are refused with a message naming the readable versions.
    static constexpr std::uint32_t kFileVersion = 3;
    static constexpr std::uint32_t kOldestReadableVersion = 2;
    static constexpr char kMagic[8] = {'A', 'C', 'E', 'R', 'P', 'L', 'Y', '\0'};

    // Allocates both partitions (zeroed): state_bytes(cfg) bytes. O(capacity * obs_dim). num_actions = A > 0 makes
    // every add and load() refuse actions >= A (0: any action >= 0); it is this object's, not the file's, and never
    // changes. Throws std::invalid_argument on a bad config or num_actions > 2^63 - 1, std::bad_alloc when out of
    // memory.
    MixedReplay(const ReplayConfig& cfg, std::uint64_t seed, std::uint64_t num_actions = 0)
        : num_actions_(checked_num_actions(num_actions)), st_(make_state(cfg)) {
        st_.rng.reseed(seed);
    }

    // ---- adding ---------------------------------------------------------------------------------------------
    // Adds in.n RL transitions in order, writing their handles to handles_out[0..n). Validates every input first
    // (finite observations and rewards, action in [0, num_actions) or >= 0 without num_actions, episode/decision in
    // [0, 2^31 - 1]: std::invalid_argument) and that the write counter stays within kMaxWritten
    // (std::overflow_error); stores nothing if any check fails.
    // O(n * obs_dim + n * 16 log16 C). Thread-safe.
    void add_rl(const TransitionsIn& in, std::int64_t* handles_out) {
        validate_transitions(in, false);
        std::lock_guard<std::mutex> lk(mu_);
        check_dim(in.obs_dim);
        const std::uint64_t room = kMaxWritten - st_.rl.written;
        // A transition takes one or two positions; count them exactly only near the limit (never in practice).
        if (in.n > room / 2) {
            const std::uint64_t need = rl_positions_needed(in);
            if (need > room) throw counter_overflow("add_rl", "RL", in.n, need, st_.rl.written);
        }
        for (std::size_t i = 0; i < in.n; ++i) handles_out[i] = add_rl_locked(in, i);
    }

    // Adds in.n LLM transitions (needs improvement and valid), one position each. Same validation and cost as
    // add_rl. Thread-safe.
    void add_llm(const TransitionsIn& in, std::int64_t* handles_out) {
        validate_transitions(in, true);
        std::lock_guard<std::mutex> lk(mu_);
        check_dim(in.obs_dim);
        if (in.n > kMaxWritten - st_.llm.written)
            throw counter_overflow("add_llm", "LLM", in.n, in.n, st_.llm.written);
        for (std::size_t i = 0; i < in.n; ++i) handles_out[i] = add_llm_locked(in, i);
    }

    // ---- sampling -------------------------------------------------------------------------------------------
    // Draws `batch` items (see the header comment for the split and the weights) into out. is_exponent in [0, 1].
    // O(batch * (obs_dim + 16 log16 C)). Throws std::invalid_argument when nothing is sampleable. Thread-safe.
    void sample(std::size_t batch, double is_exponent, const BatchOut& out) {
        check_batch(batch, "batch_size");
        if (!(is_exponent >= 0.0 && is_exponent <= 1.0)) {
            std::ostringstream os;
            os << "is_exponent = " << is_exponent << " out of range [0, 1]";
            throw std::invalid_argument(os.str());
        }
        std::lock_guard<std::mutex> lk(mu_);
        check_dim(out.obs_dim);
        const Rl& rl = st_.rl;
        const Llm& lm = st_.llm;
        const double rl_total = rl.sum.root(), llm_total = lm.sum.root();
        const bool rl_any = rl_total > 0.0, llm_any = llm_total > 0.0;
        if (!rl_any && !llm_any)
            throw std::invalid_argument("cannot sample: the buffer holds no sampleable transition (size() = " +
                                        std::to_string(size_locked()) + ")");
        const std::size_t n_rl = rl_share(batch, rl_any, llm_any);
        const std::size_t n_llm = batch - n_rl;
        q_.resize(batch);
        slots_.resize(batch);
        // Stratified uniforms (RL first, then LLM: the generator's draw order), then one batched descent per tree.
        for (std::size_t i = 0; i < n_rl; ++i)
            q_[i] = (static_cast<double>(i) + st_.rng.uniform()) * rl_total / static_cast<double>(n_rl);
        for (std::size_t j = 0; j < n_llm; ++j)
            q_[n_rl + j] = (static_cast<double>(j) + st_.rng.uniform()) * llm_total / static_cast<double>(n_llm);
        rl.sum.find_batch(q_.data(), slots_.data(), n_rl);
        lm.sum.find_batch(q_.data() + n_rl, slots_.data() + n_rl, n_llm);
        const double inv_batch = 1.0 / static_cast<double>(batch);
        const double rl_scale = static_cast<double>(n_rl) * inv_batch, llm_scale = static_cast<double>(n_llm) * inv_batch;
        for (std::size_t i = 0; i < n_rl; ++i) q_[i] = rl_scale * rl.sum.leaf(slots_[i]) / rl_total;
        for (std::size_t j = n_rl; j < batch; ++j) q_[j] = llm_scale * lm.sum.leaf(slots_[j]) / llm_total;
        fill_rows(slots_.data(), n_rl, 0, false, out);
        fill_rows(slots_.data() + n_rl, n_llm, n_rl, true, out);
        const double n_items = static_cast<double>(size_locked());
        double w_max = 0.0;
        for (std::size_t i = 0; i < batch; ++i) {
            q_[i] = std::pow(n_items * q_[i], -is_exponent);  // q_i > 0: only positive leaves are ever found
            w_max = std::max(w_max, q_[i]);
        }
        for (std::size_t i = 0; i < batch; ++i) out.weight[i] = static_cast<float>(q_[i] / w_max);
    }

    // Copies the items named by handles[0..n) into out (weight 1). Throws std::out_of_range naming the first handle
    // that is not live (stale, never issued, or not a transition). O(n * obs_dim). Thread-safe.
    void get(const std::int64_t* handles, std::size_t n, const BatchOut& out) const {
        std::lock_guard<std::mutex> lk(mu_);
        check_dim(out.obs_dim);
        for (std::size_t i = 0; i < n; ++i) {
            std::size_t slot = 0;
            const Status s = classify(handles[i], slot);
            if (s != Status::kLive) {
                std::ostringstream os;
                os << "index[" << i << "] = " << handles[i] << " is "
                   << (s == Status::kStale ? "stale (its slot was overwritten, or it is not a transition)"
                                           : "not a handle issued by this buffer");
                throw std::out_of_range(os.str());
            }
            if (handles[i] & 1)
                fill_llm_row(slot, i, out, LastWrite(st_.llm.written, st_.cfg.llm_capacity));
            else
                fill_rl_row(slot, i, out, LastWrite(st_.rl.written, st_.cfg.rl_capacity));
            out.weight[i] = 1.0f;
        }
    }

    // ---- updates --------------------------------------------------------------------------------------------
    // Sets the priorities of live RL handles, in order (a duplicated handle ends with its last priority). Returns
    // how many were applied: stale handles and LLM handles (whose Eq. 8 weight does not depend on a priority) are
    // skipped. Validates everything first: a priority that is NaN, infinite, negative or above FLT_MAX throws
    // std::invalid_argument, a handle that was never issued throws std::out_of_range; nothing is changed then.
    // O(n * 16 log16 C) at worst; a node shared by several handles is recomputed once. Thread-safe.
    std::size_t update_priorities(const std::int64_t* handles, const double* priority, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            const double p = priority[i];
            if (!(std::isfinite(p) && p >= 0.0 && p <= static_cast<double>(std::numeric_limits<float>::max()))) {
                std::ostringstream os;
                os << "priority[" << i << "] = " << p << " must be finite and in [0, "
                   << std::numeric_limits<float>::max() << "]";
                throw std::invalid_argument(os.str());
            }
        }
        std::lock_guard<std::mutex> lk(mu_);
        check_issued(handles, n);
        // Pass 1 finds the live RL slots (reading their flags, prefetched kAhead handles ahead) and prefetches
        // their max-tree leaves; pass 2 sets the max tree per item (it mostly stops after a level or two) and the
        // sum tree in one batched bottom-up pass (SumTree::set_many). The result equals setting the items one by
        // one, in order.
        constexpr std::size_t kAhead = 8;
        const std::uint64_t cap = st_.cfg.rl_capacity;
        slots_.resize(n);
        leaves_.resize(n);
        std::size_t m = 0;  // live RL items
        for (std::size_t i = 0; i < n; ++i) {
            if (i + kAhead < n && !(handles[i + kAhead] & 1))
                prefetch(&st_.rl.flags[(static_cast<std::uint64_t>(handles[i + kAhead]) >> 1) % cap]);
            std::size_t slot = 0;
            if ((handles[i] & 1) || classify(handles[i], slot) != Status::kLive) continue;
            st_.rl.maxp.prefetch_children(1, slot / SumTree::kFanout);
            slots_[m] = slot;
            leaves_[m] = static_cast<double>(static_cast<float>(priority[i]));  // the float32 priority
            ++m;
        }
        // Separate loops: a short max-tree loop lets the core overlap the leaf misses of several items, which a
        // loop body containing pow() does not (measured: 2x slower merged).
        for (std::size_t j = 0; j < m; ++j) st_.rl.maxp.set(slots_[j], static_cast<float>(leaves_[j]));
        for (std::size_t j = 0; j < m; ++j) leaves_[j] = leaf_of(static_cast<float>(leaves_[j]));
        st_.rl.sum.set_many(slots_.data(), leaves_.data(), m);
        return m;
    }

    // Replaces the stored reward of live handles (RL or LLM), keeping original_reward. Returns how many were
    // applied (stale handles are skipped). Rewards must be finite float32 values (std::invalid_argument); handles
    // never issued throw std::out_of_range; nothing is changed then. O(n). Thread-safe.
    std::size_t update_rewards(const std::int64_t* handles, const double* reward, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) check_reward(reward[i], "reward", i);
        std::lock_guard<std::mutex> lk(mu_);
        check_issued(handles, n);
        std::size_t applied = 0;
        for (std::size_t i = 0; i < n; ++i) {
            std::size_t slot = 0;
            if (classify(handles[i], slot) != Status::kLive) continue;
            if (handles[i] & 1)
                st_.llm.reward[slot] = static_cast<float>(reward[i]);
            else
                st_.rl.meta[slot].reward = static_cast<float>(reward[i]);
            ++applied;
        }
        return applied;
    }

    // ---- inspection -----------------------------------------------------------------------------------------
    // Live RL transitions, oldest first. O(C). Thread-safe.
    RlColumns rl_columns() const {
        std::lock_guard<std::mutex> lk(mu_);
        const Rl& rl = st_.rl;
        RlColumns c;
        const std::uint64_t cap = st_.cfg.rl_capacity;
        const std::uint64_t first = rl.written > cap ? rl.written - cap : 0;
        for (std::uint64_t p = first; p < rl.written; ++p) {
            const std::size_t s = static_cast<std::size_t>(p % cap);
            if (!(rl.flags[s] & kHead)) continue;
            c.index.push_back(static_cast<std::int64_t>(p << 1));
            const RlScalars& m = rl.meta[s];
            c.episode.push_back(m.episode);
            c.decision.push_back(m.decision);
            c.action.push_back(m.action);
            c.reward.push_back(m.reward);
            c.original_reward.push_back(m.original_reward);
            c.done.push_back(rl.flags[s] & kDone);
            c.truncated.push_back(rl.flags[s] & kTruncated);
        }
        return c;
    }

    // Live RL transitions + live valid LLM items (the N of the importance weights). O(1). Thread-safe.
    std::size_t size() const {
        std::lock_guard<std::mutex> lk(mu_);
        return size_locked();
    }
    std::size_t rl_size() const {
        std::lock_guard<std::mutex> lk(mu_);
        return st_.rl.heads;
    }
    // Live LLM items, valid or not.
    std::size_t llm_size() const {
        std::lock_guard<std::mutex> lk(mu_);
        return static_cast<std::size_t>(std::min<std::uint64_t>(st_.llm.written, st_.cfg.llm_capacity));
    }
    std::size_t llm_valid_size() const {
        std::lock_guard<std::mutex> lk(mu_);
        return st_.llm.valid_count;
    }
    // Priority a new RL transition would get now. O(1). Thread-safe.
    double max_priority() const {
        std::lock_guard<std::mutex> lk(mu_);
        return new_priority();
    }
    // Bytes allocated by the RL partition (observations, columns, both trees). Thread-safe.
    std::size_t rl_nbytes() const {
        std::lock_guard<std::mutex> lk(mu_);
        return rl_nbytes_locked();
    }
    // Bytes allocated by both partitions (state_bytes of the current config). Thread-safe.
    std::size_t nbytes() const {
        std::lock_guard<std::mutex> lk(mu_);
        const Llm& lm = st_.llm;
        return rl_nbytes_locked() + (lm.obs.size() + lm.next_obs.size()) * sizeof(float) +
               lm.action.size() * sizeof(std::int64_t) +
               (lm.reward.size() + lm.original_reward.size() + lm.improvement.size()) * sizeof(float) +
               (lm.episode.size() + lm.decision.size()) * sizeof(std::int32_t) + lm.flags.size() + lm.sum.nbytes();
    }
    // Bytes a buffer of this (valid) config allocates, what the constructor and load() ask for: per RL slot
    // 4 obs_dim + 25 bytes plus ~12.8 of tree nodes, per LLM slot 8 obs_dim + 29 plus ~8.5. At the largest config the
    // limits admit (obs_dim 1, rl_capacity 2^38 - 2) that is 11.5 TB. O(log C).
    static std::uint64_t state_bytes(const ReplayConfig& c) {
        const std::uint64_t d = c.obs_dim, n = c.rl_capacity, m = c.llm_capacity;
        return n * (4 * d + sizeof(RlScalars) + 1) + tree_nodes(n) * (8 + 4) + m * (8 * d + 8 + 5 * 4 + 1) +
               tree_nodes(m) * 8;
    }
    // The num_actions given to the constructor (0: none). Immutable, so no lock.
    std::uint64_t num_actions() const { return num_actions_; }
    ReplayConfig config() const {
        std::lock_guard<std::mutex> lk(mu_);
        return st_.cfg;
    }
    Rng::State rng_state() const {
        std::lock_guard<std::mutex> lk(mu_);
        return st_.rng.state();
    }
    void set_rng_state(const Rng::State& s) {
        std::lock_guard<std::mutex> lk(mu_);
        st_.rng.set_state(s);
    }
    // Copies of the sum-tree leaves (RL then LLM) and roots, for tests and diagnostics. O(C). Thread-safe.
    void tree_snapshot(std::vector<double>& rl_leaves, std::vector<double>& llm_leaves, double& rl_root,
                       double& llm_root, std::vector<float>& rl_priorities, float& max_root) const {
        std::lock_guard<std::mutex> lk(mu_);
        rl_leaves.assign(st_.rl.sum.leaves(), st_.rl.sum.leaves() + st_.rl.sum.size());
        llm_leaves.assign(st_.llm.sum.leaves(), st_.llm.sum.leaves() + st_.llm.sum.size());
        rl_priorities.assign(st_.rl.maxp.leaves(), st_.rl.maxp.leaves() + st_.rl.maxp.size());
        rl_root = st_.rl.sum.root();
        llm_root = st_.llm.sum.root();
        max_root = st_.rl.maxp.root();
    }

    // Full consistency check (the one load() applies): stored values are ones an add accepts, every tree equals its
    // rebuild bit for bit, leaves agree with flags, priorities and improvements, counters agree with the flags.
    // Returns "" when consistent, else a description. O(C * obs_dim). Thread-safe.
    std::string check_invariants() const {
        std::lock_guard<std::mutex> lk(mu_);
        const std::string problem = validate_state(st_);
        return problem.empty() ? foreign_action(st_, num_actions_) : problem;
    }

    // ---- persistence ----------------------------------------------------------------------------------------
    // Writes the state (config, pointers, continuation state, generator state and the used slots of every column
    // and tree leaf array: format version 3 above) to path atomically: a temporary file in the same directory,
    // fsync, rename. Layout: magic, version, byte-order tag, header, arrays, checksum (see replay_io.hpp). A file
    // costs 4 D + 37 bytes per used RL slot and 8 D + 37 per used LLM slot, whatever the capacities.
    // O(file size); holds the lock while writing, so a concurrent writer waits. Throws std::system_error on I/O
    // failure.
    void save(const std::string& path) const {
        std::lock_guard<std::mutex> lk(mu_);
        AtomicFileWriter w(path);
        w.write(kMagic, sizeof(kMagic));
        w.put<std::uint32_t>(kFileVersion);
        w.put<std::uint32_t>(kByteOrderTag);
        write_header(w, st_);
        for_each_used_array(const_cast<State&>(st_), [&](const char*, void* p, std::size_t n) { w.write(p, n); });
        const std::uint64_t h = w.hash();
        w.write(&h, sizeof(h));
        w.commit();
    }

    // Replaces the whole state (config included) by the file's (format version 2 or 3). Checks, in this order and
    // BEFORE allocating anything that grows with a capacity or touching this object: the header (config limits,
    // write counters <= kMaxWritten), the file's size against the size its header implies, and the checksum, which
    // is computed by streaming the file through a 1 MiB buffer. A corrupted header field (a flipped capacity) is
    // therefore a size or checksum error that costs no memory. Only then does it allocate state_bytes(config) and
    // read the file a second time (hashing again: a file that changed in between is refused), then checks every
    // invariant (validate_state: the values an add would refuse, leaves against priorities and I_v, trees,
    // counters) and, with num_actions, that every stored action is below it. On any problem throws ReplayFileError
    // (std::invalid_argument) naming the file and the problem (column, slot and value); an allocation that fails
    // names the column, the header field and the bytes it asked for. This object is then unchanged. A checksum
    // only detects accidental corruption, so a file edited and re-checksummed is still validated. Throws
    // std::system_error if the file cannot be read.
    // O(file size + capacity * obs_dim): reads the file twice and allocates state_bytes(config) once; the lock is
    // held only for the final swap. Thread-safe.
    void load(const std::string& path) {
        CheckedFileReader r(path);
        const std::uint64_t fixed = sizeof(kMagic) + 8 + kHeaderBytes + 8;
        if (r.size() < fixed) {
            std::ostringstream os;
            os << "file is truncated: " << r.size() << " bytes, a replay file has at least " << fixed;
            throw ReplayFileError(path, os.str());
        }
        char magic[sizeof(kMagic)];
        r.read(magic, sizeof(magic));
        if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
            throw ReplayFileError(path, "not a replay buffer file (bad magic bytes)");
        const auto version = r.get<std::uint32_t>();
        if (version < kOldestReadableVersion || version > kFileVersion) {
            std::ostringstream os;
            os << "unsupported format version " << version << " (this build reads versions " << kOldestReadableVersion
               << " to " << kFileVersion << "): "
               << (version > kFileVersion ? "it was written by a newer ace_hybrid; upgrade ace_hybrid to read it"
                                          : "it predates the current layout and cannot be converted; start a new "
                                            "buffer, or read it with the ace_hybrid release that wrote it");
            throw ReplayFileError(path, os.str());
        }
        if (r.get<std::uint32_t>() != kByteOrderTag)
            throw ReplayFileError(path, "written on a machine with a different byte order");
        Header h = read_header(r);
        try {
            validate_config(h.cfg);
        } catch (const std::invalid_argument& e) {
            throw ReplayFileError(path, std::string("invalid header: ") + e.what());
        }
        const std::string counters = check_counters(h.rl_written, h.llm_written);
        if (!counters.empty()) throw ReplayFileError(path, "invalid header: " + counters);
        const std::vector<Block> blocks = file_blocks(version, h.cfg, h.rl_written, h.llm_written);
        std::uint64_t expected = fixed;
        for (const Block& b : blocks) expected += b.bytes;  // < 2^50 under the config limits: no overflow
        if (r.size() != expected) {
            std::ostringstream os;
            os << "size " << r.size() << " bytes does not match the " << expected
               << " bytes its header implies (truncated or corrupted)";
            throw ReplayFileError(path, os.str());
        }
        // Pass 1: the checksum, through a bounded buffer (no allocation proportional to a capacity yet).
        const std::uint64_t payload_at = r.offset(), header_hash = r.hash();
        for (const Block& b : blocks) r.hash_through(b.bytes);
        const std::uint64_t computed = r.hash();
        std::uint64_t stored = 0;
        r.read(&stored, sizeof(stored), false);
        if (stored != computed) throw ReplayFileError(path, "checksum mismatch (the file is corrupted)");
        // Pass 2: allocate at the declared capacities and read the contents, hashing them again.
        r.seek(payload_at, header_hash);
        State fresh = make_state(h.cfg, &path);
        fresh.rl.written = h.rl_written;  // before reading: the used prefix of a version 3 file depends on it
        fresh.llm.written = h.llm_written;
        std::size_t k = 0;
        auto read = [&](const char* name, void* p, std::size_t n) {
            if (k >= blocks.size() || blocks[k].bytes != n || std::strcmp(blocks[k].name, name) != 0)
                throw std::logic_error(std::string("replay file layout disagrees with its block list at ") + name);
            ++k;
            r.read(p, n);
        };
        if (version == 2) {
            for_each_full_array(fresh, read);
        } else {
            for_each_used_array(fresh, read);
            fresh.rl.sum.rebuild();  // the internal nodes are a function of the leaves: restored bit for bit
            fresh.rl.maxp.rebuild();
            fresh.llm.sum.rebuild();
        }
        if (r.hash() != stored)
            throw ReplayFileError(path, "checksum mismatch on the second reading (the file changed while it was read)");
        if (h.has_prev > 1) {
            std::ostringstream os;
            os << "inconsistent contents: has_prev = " << int(h.has_prev) << " must be 0 or 1";
            throw ReplayFileError(path, os.str());
        }
        fresh.rl.has_prev = h.has_prev != 0;
        fresh.rl.prev_flags = h.prev_flags;
        fresh.rl.prev_episode = h.prev_episode;
        fresh.rl.prev_decision = h.prev_decision;
        try {
            fresh.rng.set_state(h.rng);
        } catch (const std::invalid_argument& e) {
            throw ReplayFileError(path, e.what());
        }
        recount(fresh);
        const std::string problem = validate_state(fresh);
        if (!problem.empty()) throw ReplayFileError(path, "inconsistent contents: " + problem);
        const std::string foreign = foreign_action(fresh, num_actions_);
        if (!foreign.empty()) throw ReplayFileError(path, foreign);
        std::lock_guard<std::mutex> lk(mu_);
        std::swap(st_, fresh);
    }

private:
    static constexpr std::uint32_t kByteOrderTag = 0x01020304u;

    template <typename T>
    using Column = std::vector<T, HugePageAllocator<T>>;

    // The scalars of one RL slot in one 24-byte record, so a sampled row costs one or two cache misses for them
    // instead of one per column.
    struct RlScalars {
        std::int64_t action = 0;
        float reward = 0.0f, original_reward = 0.0f;
        std::int32_t episode = 0, decision = 0;
    };
    static_assert(sizeof(RlScalars) == 24, "RlScalars is stored in files as 24 bytes");

    struct Rl {
        Column<float> obs;  // capacity * obs_dim
        Column<RlScalars> meta;
        Column<std::uint8_t> flags;
        SumTree sum;   // leaves: priority^alpha of live heads, 0 elsewhere
        MaxTree maxp;  // leaves: float32 priority of live heads, 0 elsewhere
        std::uint64_t written = 0;
        std::size_t heads = 0;
        bool has_prev = false;
        std::uint8_t prev_flags = 0;
        std::int32_t prev_episode = 0, prev_decision = 0;
    };
    struct Llm {
        Column<float> obs, next_obs;
        Column<std::int64_t> action;
        Column<float> reward, original_reward, improvement;
        Column<std::int32_t> episode, decision;
        Column<std::uint8_t> flags;
        SumTree sum;  // leaves: I_v * exp(clip(improvement / tau))
        std::uint64_t written = 0;
        std::size_t valid_count = 0;
    };
    struct State {
        ReplayConfig cfg;
        Rl rl;
        Llm llm;
        Rng rng;
    };
    struct Header {
        ReplayConfig cfg;
        std::uint64_t rl_written = 0, llm_written = 0;
        std::uint8_t has_prev = 0, prev_flags = 0;
        std::int32_t prev_episode = 0, prev_decision = 0;
        Rng::State rng{};
    };
    static constexpr std::uint64_t kHeaderBytes = 3 * 8 + 3 * 8 + 2 * 8 + 2 + 2 * 4 + 4 * 8;

    enum class Status { kLive, kStale, kInvalid };

    // A zeroed state of a valid config: state_bytes(cfg) bytes. Out of memory, the constructor (path == nullptr)
    // gets std::bad_alloc; load() (path = the file) gets ReplayFileError naming the file, the column, the header
    // field that sized it and the bytes it asked for. O(capacity * obs_dim).
    static State make_state(const ReplayConfig& cfg, const std::string* path = nullptr) {
        validate_config(cfg);
        State s;
        s.cfg = cfg;
        const auto d = static_cast<std::size_t>(cfg.obs_dim);
        const auto c = static_cast<std::size_t>(cfg.rl_capacity);
        const auto m = static_cast<std::size_t>(cfg.llm_capacity);
        // column: the file's name for it; llm: sized by llm_capacity (else rl_capacity); obs: and by obs_dim.
        auto alloc = [&](const char* column, bool llm, bool obs, std::uint64_t bytes, auto&& allocate) {
            try {
                allocate();
            } catch (const std::bad_alloc&) {  // std::bad_array_new_length too
                if (!path) throw;
                throw allocation_error(*path, cfg, column, llm, obs, bytes);
            } catch (const std::length_error&) {
                if (!path) throw;
                throw allocation_error(*path, cfg, column, llm, obs, bytes);
            }
        };
        const std::uint64_t obs_rl = std::uint64_t(c) * d * sizeof(float);
        const std::uint64_t obs_llm = std::uint64_t(m) * d * sizeof(float);
        alloc("rl.obs", false, true, obs_rl, [&] { s.rl.obs.assign(c * d, 0.0f); });
        alloc("rl.scalars", false, false, c * sizeof(RlScalars), [&] { s.rl.meta.assign(c, RlScalars{}); });
        alloc("rl.flags", false, false, c, [&] { s.rl.flags.assign(c, 0); });
        alloc("rl.sum", false, false, tree_nodes(c) * 8, [&] { s.rl.sum.resize(c); });
        alloc("rl.max", false, false, tree_nodes(c) * 4, [&] { s.rl.maxp.resize(c); });
        alloc("llm.obs", true, true, obs_llm, [&] { s.llm.obs.assign(m * d, 0.0f); });
        alloc("llm.next_obs", true, true, obs_llm, [&] { s.llm.next_obs.assign(m * d, 0.0f); });
        alloc("llm.action", true, false, m * 8, [&] { s.llm.action.assign(m, 0); });
        alloc("llm.reward", true, false, m * 4, [&] { s.llm.reward.assign(m, 0.0f); });
        alloc("llm.original_reward", true, false, m * 4, [&] { s.llm.original_reward.assign(m, 0.0f); });
        alloc("llm.improvement", true, false, m * 4, [&] { s.llm.improvement.assign(m, 0.0f); });
        alloc("llm.episode", true, false, m * 4, [&] { s.llm.episode.assign(m, 0); });
        alloc("llm.decision", true, false, m * 4, [&] { s.llm.decision.assign(m, 0); });
        alloc("llm.flags", true, false, m, [&] { s.llm.flags.assign(m, 0); });
        alloc("llm.sum", true, false, tree_nodes(m) * 8, [&] { s.llm.sum.resize(m); });
        return s;
    }

    static ReplayFileError allocation_error(const std::string& path, const ReplayConfig& cfg, const char* column,
                                            bool llm, bool obs, std::uint64_t bytes) {
        std::ostringstream os;
        os << "cannot allocate " << bytes << " bytes for " << column << ", sized by the header's "
           << (llm ? "llm_capacity = " : "rl_capacity = ") << (llm ? cfg.llm_capacity : cfg.rl_capacity);
        if (obs) os << " and obs_dim = " << cfg.obs_dim;
        os << ": out of memory (a buffer of these capacities takes " << state_bytes(cfg) << " bytes in all)";
        return ReplayFileError(path, os.str());
    }

    // Slots ever written: the rings fill slots 0, 1, 2, ... in order, so these are the prefix [0, used).
    static std::uint64_t used_slots(std::uint64_t written, std::uint64_t capacity) {
        return std::min(written, capacity);
    }

    // The arrays of a version 3 file in file order: the used prefix of every column and of the tree leaves (the
    // same function drives save and load, so the layouts cannot disagree). Reads s.rl.written / s.llm.written.
    template <typename F>
    static void for_each_used_array(State& s, F&& f) {
        const auto d = static_cast<std::size_t>(s.cfg.obs_dim);
        const auto n = static_cast<std::size_t>(used_slots(s.rl.written, s.cfg.rl_capacity));
        const auto m = static_cast<std::size_t>(used_slots(s.llm.written, s.cfg.llm_capacity));
        auto v = [&](const char* name, auto* data, std::size_t count) {
            f(name, static_cast<void*>(data), count * sizeof(*data));
        };
        v("rl.obs", s.rl.obs.data(), n * d);
        v("rl.scalars", s.rl.meta.data(), n);
        v("rl.flags", s.rl.flags.data(), n);
        v("rl.sum leaves", s.rl.sum.data().data(), n);
        v("rl.max leaves", s.rl.maxp.data().data(), n);
        v("llm.obs", s.llm.obs.data(), m * d);
        v("llm.next_obs", s.llm.next_obs.data(), m * d);
        v("llm.action", s.llm.action.data(), m);
        v("llm.reward", s.llm.reward.data(), m);
        v("llm.original_reward", s.llm.original_reward.data(), m);
        v("llm.improvement", s.llm.improvement.data(), m);
        v("llm.episode", s.llm.episode.data(), m);
        v("llm.decision", s.llm.decision.data(), m);
        v("llm.flags", s.llm.flags.data(), m);
        v("llm.sum leaves", s.llm.sum.data().data(), m);
    }

    // The arrays of a version 2 file in file order: every column at capacity and the whole trees (read only).
    template <typename F>
    static void for_each_full_array(State& s, F&& f) {
        auto v = [&](const char* name, auto& vec) {
            f(name, static_cast<void*>(vec.data()), vec.size() * sizeof(vec[0]));
        };
        v("rl.obs", s.rl.obs);
        v("rl.scalars", s.rl.meta);
        v("rl.flags", s.rl.flags);
        v("rl.sum", s.rl.sum.data());
        v("rl.max", s.rl.maxp.data());
        v("llm.obs", s.llm.obs);
        v("llm.next_obs", s.llm.next_obs);
        v("llm.action", s.llm.action);
        v("llm.reward", s.llm.reward);
        v("llm.original_reward", s.llm.original_reward);
        v("llm.improvement", s.llm.improvement);
        v("llm.episode", s.llm.episode);
        v("llm.decision", s.llm.decision);
        v("llm.flags", s.llm.flags);
        v("llm.sum", s.llm.sum.data());
    }

    static std::uint64_t tree_nodes(std::uint64_t n) {
        std::uint64_t total = 0;
        while (true) {
            total += n;
            if (n == 1) return total;
            n = (n + SumTree::kFanout - 1) / SumTree::kFanout;
        }
    }

    // The blocks of a file's payload (after the header, before the checksum), in file order, from its header
    // alone: load() verifies the size and the checksum with them before allocating, and checks that the
    // for_each_*_array it then reads with names the same blocks. Version 3: the used prefix of every column and of
    // the tree leaves; version 2: every column at capacity and the whole trees. A valid config keeps every size
    // below 2^50 bytes. O(log C).
    struct Block {
        const char* name;
        std::uint64_t bytes;
    };
    static std::vector<Block> file_blocks(std::uint32_t version, const ReplayConfig& c, std::uint64_t rl_written,
                                          std::uint64_t llm_written) {
        const std::uint64_t d = c.obs_dim;
        const bool full = version == 2;
        const std::uint64_t n = full ? c.rl_capacity : used_slots(rl_written, c.rl_capacity);
        const std::uint64_t m = full ? c.llm_capacity : used_slots(llm_written, c.llm_capacity);
        return {{"rl.obs", n * d * 4},
                {"rl.scalars", n * sizeof(RlScalars)},
                {"rl.flags", n},
                {full ? "rl.sum" : "rl.sum leaves", (full ? tree_nodes(n) : n) * 8},
                {full ? "rl.max" : "rl.max leaves", (full ? tree_nodes(n) : n) * 4},
                {"llm.obs", m * d * 4},
                {"llm.next_obs", m * d * 4},
                {"llm.action", m * 8},
                {"llm.reward", m * 4},
                {"llm.original_reward", m * 4},
                {"llm.improvement", m * 4},
                {"llm.episode", m * 4},
                {"llm.decision", m * 4},
                {"llm.flags", m},
                {full ? "llm.sum" : "llm.sum leaves", (full ? tree_nodes(m) : m) * 8}};
    }

    static void write_header(AtomicFileWriter& w, const State& s) {
        w.put<std::uint64_t>(s.cfg.obs_dim);
        w.put<std::uint64_t>(s.cfg.rl_capacity);
        w.put<std::uint64_t>(s.cfg.llm_capacity);
        w.put<double>(s.cfg.alpha);
        w.put<double>(s.cfg.beta);
        w.put<double>(s.cfg.tau);
        w.put<std::uint64_t>(s.rl.written);
        w.put<std::uint64_t>(s.llm.written);
        w.put<std::uint8_t>(s.rl.has_prev ? 1 : 0);
        w.put<std::uint8_t>(s.rl.prev_flags);
        w.put<std::int32_t>(s.rl.prev_episode);
        w.put<std::int32_t>(s.rl.prev_decision);
        for (std::uint64_t x : s.rng.state()) w.put<std::uint64_t>(x);
    }

    static Header read_header(CheckedFileReader& r) {
        Header h;
        h.cfg.obs_dim = r.get<std::uint64_t>();
        h.cfg.rl_capacity = r.get<std::uint64_t>();
        h.cfg.llm_capacity = r.get<std::uint64_t>();
        h.cfg.alpha = r.get<double>();
        h.cfg.beta = r.get<double>();
        h.cfg.tau = r.get<double>();
        h.rl_written = r.get<std::uint64_t>();
        h.llm_written = r.get<std::uint64_t>();
        h.has_prev = r.get<std::uint8_t>();
        h.prev_flags = r.get<std::uint8_t>();
        h.prev_episode = r.get<std::int32_t>();
        h.prev_decision = r.get<std::int32_t>();
        for (auto& x : h.rng) x = r.get<std::uint64_t>();
        return h;
    }

    static void recount(State& s) {
        s.rl.heads = 0;
        for (auto f : s.rl.flags) s.rl.heads += (f & kHead) ? 1 : 0;
        s.llm.valid_count = 0;
        for (auto f : s.llm.flags) s.llm.valid_count += (f & kValid) ? 1 : 0;
    }

    // The position last written to `slot` (valid when written > slot).
    static std::uint64_t position_of(std::uint64_t slot, std::uint64_t written, std::uint64_t cap) {
        const std::uint64_t last = written - 1;
        return last - ((last % cap + cap - slot) % cap);
    }

    // Every invariant of a state, checked in an order that names the root cause: the continuation state, then slot
    // by slot the values an add would have refused (non-finite observations, rewards or improvements, negative
    // actions, episode or decision ids out of [0, 2^31 - 1], unknown flag bits, negative or non-finite
    // priorities), then that each leaf is what its slot implies (priority^alpha for an RL transition, I_v *
    // exp(clip(improvement / tau)) for an LLM item, 0 elsewhere; relative tolerance 1e-9 so that a file moved
    // between machines whose pow / exp differ in the last bit still loads), then the trees and the counters.
    // Returns "" when consistent, else the first problem, naming the column, the slot and the value.
    // O((rl_capacity + llm_capacity) * obs_dim).
    static std::string validate_state(const State& s) {
        std::ostringstream os;
        const Rl& rl = s.rl;
        const Llm& lm = s.llm;
        const std::uint64_t cap = s.cfg.rl_capacity, mcap = s.cfg.llm_capacity;
        const auto d = static_cast<std::size_t>(s.cfg.obs_dim);
        const std::string counters = check_counters(rl.written, lm.written);
        if (!counters.empty()) return counters;
        if (rl.prev_flags & ~(kDone | kTruncated)) {
            os << "prev_flags = " << int(rl.prev_flags) << " has unknown bits (known: done 1, truncated 2)";
            return os.str();
        }
        for (const auto& [name, v] : {std::pair<const char*, std::int32_t>{"prev_episode", rl.prev_episode},
                                      std::pair<const char*, std::int32_t>{"prev_decision", rl.prev_decision}}) {
            if (v < 0) {
                os << name << " = " << v << " out of range [0, " << kMaxEpisodeOrDecision << "]";
                return os.str();
            }
        }
        if (rl.has_prev && rl.written < 2) return "continuation state without a stored observation";
        // Names a value that an add would have refused; returns false (the caller returns os.str()).
        auto finite_row = [&os, d](const char* name, const float* row, std::uint64_t k) {
            for (std::size_t j = 0; j < d; ++j) {
                if (!std::isfinite(row[j])) {
                    os << name << "[slot " << k << ", " << j << "] = " << row[j] << " is not finite";
                    return false;
                }
            }
            return true;
        };
        auto finite = [&os](const char* name, float v, std::uint64_t k) {
            if (std::isfinite(v)) return true;
            os << name << "[slot " << k << "] = " << v << " is not finite";
            return false;
        };
        auto in_range = [&os](const char* name, std::int64_t v, std::int64_t hi, std::uint64_t k) {
            if (v >= 0 && v <= hi) return true;
            os << name << "[slot " << k << "] = " << v << " out of range [0, " << hi << "]";
            return false;
        };
        auto leaf_matches = [&os](const char* name, double leaf, double expected, std::uint64_t k, const char* what) {
            if (std::fabs(leaf - expected) <= 1e-9 * expected) return true;  // false for NaN; exact 0 when expected 0
            os << name << "[slot " << k << "] = " << leaf << " does not match " << what << " = " << expected;
            return false;
        };
        constexpr std::int64_t kMaxAction = std::numeric_limits<std::int64_t>::max();
        std::size_t heads = 0, valid = 0;
        for (std::uint64_t k = 0; k < cap; ++k) {
            const std::uint8_t f = rl.flags[k];
            const RlScalars& m = rl.meta[k];
            const double leaf = rl.sum.leaf(k);
            const float pr = rl.maxp.leaf(k);
            if (!finite_row("rl.obs", rl.obs.data() + k * d, k) || !in_range("rl.action", m.action, kMaxAction, k) ||
                !in_range("rl.episode", m.episode, kMaxEpisodeOrDecision, k) ||
                !in_range("rl.decision", m.decision, kMaxEpisodeOrDecision, k) || !finite("rl.reward", m.reward, k) ||
                !finite("rl.original_reward", m.original_reward, k))
                return os.str();
            if (f & ~(kDone | kTruncated | kHead)) {
                os << "rl.flags[slot " << k << "] = " << int(f) << " has unknown bits (known: done 1, truncated 2, "
                   << "transition 4)";
                return os.str();
            }
            if (!(pr >= 0.0f && std::isfinite(pr))) {
                os << "rl.priority[slot " << k << "] = " << pr << " must be finite and >= 0";
                return os.str();
            }
            if (f & kHead) {
                ++heads;
                // A head must have its next observation written after it.
                if (k >= rl.written || position_of(k, rl.written, cap) + 1 >= rl.written) {
                    os << "RL slot " << k << " is a transition without a next observation";
                    return os.str();
                }
                if (!leaf_matches("rl.sum leaf", leaf, leaf_of(s.cfg, pr), k, "priority^alpha")) return os.str();
            } else if (leaf != 0.0 || pr != 0.0f) {
                os << "RL slot " << k << " holds no transition but has priority " << pr << " (sum-tree leaf " << leaf
                   << ")";
                return os.str();
            }
        }
        for (std::uint64_t k = 0; k < mcap; ++k) {
            const std::uint8_t f = lm.flags[k];
            const double leaf = lm.sum.leaf(k);
            if (!finite_row("llm.obs", lm.obs.data() + k * d, k) ||
                !finite_row("llm.next_obs", lm.next_obs.data() + k * d, k) ||
                !in_range("llm.action", lm.action[k], kMaxAction, k) ||
                !in_range("llm.episode", lm.episode[k], kMaxEpisodeOrDecision, k) ||
                !in_range("llm.decision", lm.decision[k], kMaxEpisodeOrDecision, k) ||
                !finite("llm.reward", lm.reward[k], k) || !finite("llm.original_reward", lm.original_reward[k], k) ||
                !finite("llm.improvement", lm.improvement[k], k))
                return os.str();
            if (f & ~(kDone | kTruncated | kValid)) {
                os << "llm.flags[slot " << k << "] = " << int(f) << " has unknown bits (known: done 1, truncated 2, "
                   << "I_v 8)";
                return os.str();
            }
            const bool is_valid = f & kValid;
            if (is_valid) {
                ++valid;
                if (k >= lm.written) {
                    os << "LLM slot " << k << " has I_v = 1 but was never written";
                    return os.str();
                }
            }
            const char* what = is_valid ? "I_v * exp(clip(improvement / tau)) with I_v = 1" : "0 (I_v = 0)";
            if (!leaf_matches("llm.sum leaf", leaf, llm_weight(s.cfg, lm.improvement[k], is_valid), k, what))
                return os.str();
        }
        if (!rl.sum.check()) return "RL sum tree differs from its rebuild";
        if (!rl.maxp.check()) return "RL max tree differs from its rebuild";
        if (!lm.sum.check()) return "LLM sum tree differs from its rebuild";
        if (!std::isfinite(rl.sum.root()) || !std::isfinite(lm.sum.root())) return "tree sum is not finite";
        if (heads != rl.heads || valid != lm.valid_count) return "item counters disagree with the flags";
        return "";
    }

    // "" when both write counters are within [0, kMaxWritten], else a description naming the limit.
    static std::string check_counters(std::uint64_t rl_written, std::uint64_t llm_written) {
        if (rl_written <= kMaxWritten && llm_written <= kMaxWritten) return "";
        std::ostringstream os;
        os << "write counters rl_written = " << rl_written << ", llm_written = " << llm_written
           << " out of range [0, " << kMaxWritten << "] (2^62: handles are (position << 1) | partition in an int64)";
        return os.str();
    }

    // "" when num_actions is 0 or every action stored in a used slot (RL records and LLM items, live or not) is
    // below it, else the first one that is not, with its column, slot and the range. O(C).
    static std::string foreign_action(const State& s, std::uint64_t num_actions) {
        if (num_actions == 0) return "";
        const auto limit = static_cast<std::int64_t>(num_actions);
        auto name = [&](const char* column, std::uint64_t k, std::int64_t a) {
            std::ostringstream os;
            os << column << "[slot " << k << "] = " << a << " is not an action of this buffer: out of range [0, "
               << num_actions << ") for num_actions = " << num_actions;
            return os.str();
        };
        const std::uint64_t n = used_slots(s.rl.written, s.cfg.rl_capacity);
        const std::uint64_t m = used_slots(s.llm.written, s.cfg.llm_capacity);
        for (std::uint64_t k = 0; k < n; ++k)
            if (s.rl.meta[k].action >= limit) return name("rl.action", k, s.rl.meta[k].action);
        for (std::uint64_t k = 0; k < m; ++k)
            if (s.llm.action[k] >= limit) return name("llm.action", k, s.llm.action[k]);
        return "";
    }

    static std::uint64_t checked_num_actions(std::uint64_t a) {
        constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
        if (a > kMax) {
            std::ostringstream os;
            os << "num_actions = " << a << " out of range [0, " << kMax << "] (0: no limit)";
            throw std::invalid_argument(os.str());
        }
        return a;
    }

    // The error of an add that would take a partition's write counter past kMaxWritten.
    static std::overflow_error counter_overflow(const char* method, const char* partition, std::size_t n,
                                                std::uint64_t need, std::uint64_t written) {
        std::ostringstream os;
        os << method << ": " << n << " transition(s) need " << need << " more " << partition << " positions, but "
           << written << " of the " << kMaxWritten << " (2^62) a handle can address are written (handles are "
           << "(position << 1) | partition in an int64); nothing was stored: save what you need and start a new "
           << "buffer";
        return std::overflow_error(os.str());
    }

    // Whether an RL transition (episode ep, decision dec, observation o) continues the previous one, whose flags,
    // episode and decision are given and whose next observation is `pending` (nullptr: none): the rule of the
    // header comment. O(obs_dim).
    static bool continues(const float* pending, std::uint8_t prev_flags, std::int32_t prev_ep, std::int32_t prev_dec,
                          std::int32_t ep, std::int32_t dec, const float* o, std::size_t d) {
        return pending && prev_ep == ep && static_cast<std::int64_t>(prev_dec) + 1 == dec &&
               !(prev_flags & (kDone | kTruncated)) && std::memcmp(o, pending, d * sizeof(float)) == 0;
    }

    // Under the lock: the positions add_rl(in) would write (one per continuing transition, two otherwise), by the
    // rule add_rl_locked applies. O(n * obs_dim).
    std::uint64_t rl_positions_needed(const TransitionsIn& in) const {
        const Rl& rl = st_.rl;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        const float* pending =
            rl.has_prev ? rl.obs.data() + static_cast<std::size_t>((rl.written - 1) % st_.cfg.rl_capacity) * d
                        : nullptr;
        std::uint8_t flags = rl.prev_flags;
        std::int32_t ep = rl.prev_episode, dec = rl.prev_decision;
        std::uint64_t need = 0;
        for (std::size_t i = 0; i < in.n; ++i) {
            const auto e = static_cast<std::int32_t>(in.episode[i]), t = static_cast<std::int32_t>(in.decision[i]);
            need += continues(pending, flags, ep, dec, e, t, in.obs + i * d, d) ? 1 : 2;
            pending = in.next_obs + i * d;  // what add_rl_locked stores at the new last position
            flags = static_cast<std::uint8_t>((in.done[i] ? kDone : 0) | (in.truncated[i] ? kTruncated : 0));
            ep = e;
            dec = t;
        }
        return need;
    }

    std::size_t rl_nbytes_locked() const {
        const Rl& rl = st_.rl;
        return rl.obs.size() * sizeof(float) + rl.meta.size() * sizeof(RlScalars) + rl.flags.size() + rl.sum.nbytes() +
               rl.maxp.nbytes();
    }

    // Under the lock: the caller's row length must match (load() may change obs_dim between calls).
    void check_dim(std::size_t d) const {
        if (d != st_.cfg.obs_dim) {
            std::ostringstream os;
            os << "observation rows of length " << d << " do not match obs_dim = " << st_.cfg.obs_dim;
            throw std::invalid_argument(os.str());
        }
    }

    static void check_batch(std::size_t batch, const char* name) {
        if (batch < 1 || batch > kMaxBatch) {
            std::ostringstream os;
            os << name << " = " << batch << " out of range [1, " << kMaxBatch << "]";
            throw std::invalid_argument(os.str());
        }
    }

    static void check_reward(double r, const char* name, std::size_t i) {
        if (!(std::isfinite(r) && std::fabs(r) <= static_cast<double>(std::numeric_limits<float>::max()))) {
            std::ostringstream os;
            os << name << "[" << i << "] = " << r << " must be a finite float32 value";
            throw std::invalid_argument(os.str());
        }
    }

    // Needs no lock: reads only the caller's arrays (laid out with in.obs_dim, checked again under the lock) and
    // num_actions_, which never changes.
    void validate_transitions(const TransitionsIn& in, bool llm) const {
        const std::size_t d = in.obs_dim;
        auto bad = [](const char* name, std::size_t i, std::size_t j, double v, const char* why) {
            std::ostringstream os;
            os << name << "[" << i << ", " << j << "] = " << v << " " << why;
            throw std::invalid_argument(os.str());
        };
        for (std::size_t i = 0; i < in.n; ++i) {
            const float* o = in.obs + i * d;
            const float* no = in.next_obs + i * d;
            for (std::size_t j = 0; j < d; ++j) {
                if (!std::isfinite(o[j])) bad("obs", i, j, o[j], "is not finite");
                if (!std::isfinite(no[j])) bad("next_obs", i, j, no[j], "is not finite");
            }
            check_reward(in.reward[i], "reward", i);
            if (in.action[i] < 0) {
                std::ostringstream os;
                os << "action[" << i << "] = " << in.action[i] << " out of range [0, "
                   << std::numeric_limits<std::int64_t>::max() << "]";
                throw std::invalid_argument(os.str());
            }
            if (num_actions_ && static_cast<std::uint64_t>(in.action[i]) >= num_actions_) {
                std::ostringstream os;
                os << "action[" << i << "] = " << in.action[i] << " out of range [0, " << num_actions_
                   << ") for num_actions = " << num_actions_;
                throw std::invalid_argument(os.str());
            }
            for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"episode", in.episode[i]},
                                          std::pair<const char*, std::int64_t>{"decision", in.decision[i]}}) {
                if (v < 0 || v > kMaxEpisodeOrDecision) {
                    std::ostringstream os;
                    os << name << "[" << i << "] = " << v << " out of range [0, " << kMaxEpisodeOrDecision << "]";
                    throw std::invalid_argument(os.str());
                }
            }
            if (llm && !std::isfinite(in.improvement[i])) {
                std::ostringstream os;
                os << "improvement[" << i << "] = " << in.improvement[i] << " is not finite";
                throw std::invalid_argument(os.str());
            }
        }
    }

    // Under the lock: throws std::out_of_range for a handle that this buffer never issued (negative, or a
    // position not yet written). Stale handles pass (they are skipped by the caller).
    void check_issued(const std::int64_t* handles, std::size_t n) const {
        for (std::size_t i = 0; i < n; ++i) {
            if (handles[i] < 0) {
                std::ostringstream os;
                os << "index[" << i << "] = " << handles[i] << " is not a handle (handles are >= 0)";
                throw std::out_of_range(os.str());
            }
            const std::uint64_t pos = static_cast<std::uint64_t>(handles[i]) >> 1;
            const std::uint64_t written = (handles[i] & 1) ? st_.llm.written : st_.rl.written;
            if (pos >= written) {
                std::ostringstream os;
                os << "index[" << i << "] = " << handles[i] << " was never issued: its position " << pos
                   << " is out of range [0, " << written << ") for the " << ((handles[i] & 1) ? "LLM" : "RL")
                   << " partition";
                throw std::out_of_range(os.str());
            }
        }
    }

    Status classify(std::int64_t h, std::size_t& slot) const {
        if (h < 0) return Status::kInvalid;
        const bool llm = h & 1;
        const std::uint64_t pos = static_cast<std::uint64_t>(h) >> 1;
        const std::uint64_t written = llm ? st_.llm.written : st_.rl.written;
        const std::uint64_t cap = llm ? st_.cfg.llm_capacity : st_.cfg.rl_capacity;
        if (pos >= written) return Status::kInvalid;
        if (written > cap && pos < written - cap) return Status::kStale;
        slot = static_cast<std::size_t>(pos % cap);
        if (!llm && !(st_.rl.flags[slot] & kHead)) return Status::kStale;
        return Status::kLive;
    }

    std::size_t size_locked() const { return st_.rl.heads + st_.llm.valid_count; }

    float new_priority() const {
        const float m = st_.rl.maxp.root();
        return m > 0.0f ? m : 1.0f;
    }

    // Sum-tree leaf of an RL transition of priority p: p^alpha (1 for every transition when alpha = 0).
    static double leaf_of(const ReplayConfig& c, float p) {
        return c.alpha == 0.0 ? 1.0 : std::pow(static_cast<double>(p), c.alpha);
    }
    double leaf_of(float p) const { return leaf_of(st_.cfg, p); }

    // Sum-tree leaf of an LLM item (Eq. 8): I_v * exp(clip(improvement / tau, -60, 60)).
    static double llm_weight(const ReplayConfig& c, float improvement, bool valid) {
        const double x = std::clamp(static_cast<double>(improvement) / c.tau, -kExponentClip, kExponentClip);
        return valid ? std::exp(x) : 0.0;
    }

    void set_priority(std::size_t slot, float p) {
        st_.rl.maxp.set(slot, p);
        st_.rl.sum.set(slot, leaf_of(p));
    }

    // Rows drawn from RL; the rest of the batch comes from LLM (the rule of the header comment). rl_any / llm_any:
    // the partition's sum is positive; at least one is.
    std::size_t rl_share(std::size_t batch, bool rl_any, bool llm_any) const {
        if (!llm_any) return batch;
        if (!rl_any) return 0;
        const double nominal = std::floor((1.0 - st_.cfg.beta) * static_cast<double>(batch) + 0.5);
        const std::size_t nominal_rl = std::min(batch, static_cast<std::size_t>(std::max(0.0, nominal)));
        const std::size_t n_llm = std::min(batch - nominal_rl, st_.llm.valid_count);
        return batch - n_llm;
    }

    // Writes one observation to the next RL position, killing the transition that lived in that slot.
    void write_rl_obs(const float* o) {
        Rl& rl = st_.rl;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        const std::size_t s = static_cast<std::size_t>(rl.written % st_.cfg.rl_capacity);
        if (rl.flags[s] & kHead) {
            --rl.heads;
            rl.maxp.set(s, 0.0f);
            rl.sum.set(s, 0.0);
        }
        rl.flags[s] = 0;
        rl.meta[s] = RlScalars{};
        std::memcpy(rl.obs.data() + s * d, o, d * sizeof(float));
        ++rl.written;
    }

    std::int64_t add_rl_locked(const TransitionsIn& in, std::size_t i) {
        Rl& rl = st_.rl;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        const std::uint64_t cap = st_.cfg.rl_capacity;
        const float* o = in.obs + i * d;
        const auto ep = static_cast<std::int32_t>(in.episode[i]);
        const auto decision = static_cast<std::int32_t>(in.decision[i]);
        const float p = new_priority();
        const float* pending = rl.has_prev ? rl.obs.data() + static_cast<std::size_t>((rl.written - 1) % cap) * d
                                           : nullptr;
        if (!continues(pending, rl.prev_flags, rl.prev_episode, rl.prev_decision, ep, decision, o, d)) write_rl_obs(o);
        const std::uint64_t head = rl.written - 1;
        const std::size_t s = static_cast<std::size_t>(head % cap);
        const std::uint8_t f = static_cast<std::uint8_t>((in.done[i] ? kDone : 0) | (in.truncated[i] ? kTruncated : 0));
        rl.flags[s] = static_cast<std::uint8_t>(kHead | f);
        rl.meta[s] = RlScalars{in.action[i], in.reward[i], in.reward[i], ep, decision};
        set_priority(s, p);
        ++rl.heads;
        write_rl_obs(in.next_obs + i * d);
        rl.has_prev = true;
        rl.prev_flags = f;
        rl.prev_episode = ep;
        rl.prev_decision = decision;
        return static_cast<std::int64_t>(head << 1);
    }

    std::int64_t add_llm_locked(const TransitionsIn& in, std::size_t i) {
        Llm& lm = st_.llm;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        const std::uint64_t pos = lm.written;
        const std::size_t s = static_cast<std::size_t>(pos % st_.cfg.llm_capacity);
        if (lm.flags[s] & kValid) --lm.valid_count;
        std::memcpy(lm.obs.data() + s * d, in.obs + i * d, d * sizeof(float));
        std::memcpy(lm.next_obs.data() + s * d, in.next_obs + i * d, d * sizeof(float));
        lm.action[s] = in.action[i];
        lm.reward[s] = lm.original_reward[s] = in.reward[i];
        lm.improvement[s] = in.improvement[i];
        lm.episode[s] = static_cast<std::int32_t>(in.episode[i]);
        lm.decision[s] = static_cast<std::int32_t>(in.decision[i]);
        const bool valid = in.valid[i];
        lm.flags[s] = static_cast<std::uint8_t>((in.done[i] ? kDone : 0) | (in.truncated[i] ? kTruncated : 0) |
                                                (valid ? kValid : 0));
        if (valid) ++lm.valid_count;
        lm.sum.set(s, llm_weight(st_.cfg, in.improvement[i], valid));
        ++lm.written;
        return static_cast<std::int64_t>((pos << 1) | 1);
    }

    // Where the last write went: position and slot of `written - 1` (written > 0), so a slot's position is found
    // without a division per row.
    struct LastWrite {
        std::uint64_t position, slot, cap;
        LastWrite(std::uint64_t written, std::uint64_t capacity)
            : position(written - 1), slot((written - 1) % capacity), cap(capacity) {}
        std::uint64_t position_of(std::uint64_t s) const { return position - (slot >= s ? slot - s : slot + cap - s); }
    };

    // Prefetches what fill_rl_row / fill_llm_row will read for slot s.
    ACE_HYBRID_ALWAYS_INLINE void prefetch_row(std::size_t s, bool llm) const {
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        if (llm) {
            const Llm& lm = st_.llm;
            prefetch_bytes(lm.obs.data() + s * d, d * sizeof(float));
            prefetch_bytes(lm.next_obs.data() + s * d, d * sizeof(float));
            prefetch(&lm.action[s]);
            prefetch(&lm.reward[s]);
            prefetch(&lm.original_reward[s]);
            prefetch(&lm.improvement[s]);
            prefetch(&lm.episode[s]);
            prefetch(&lm.decision[s]);
            prefetch(&lm.flags[s]);
            return;
        }
        const Rl& rl = st_.rl;
        const std::size_t cap = static_cast<std::size_t>(st_.cfg.rl_capacity);
        if (s + 1 < cap) {
            prefetch_bytes(rl.obs.data() + s * d, 2 * d * sizeof(float));  // obs and next obs are adjacent
        } else {
            prefetch_bytes(rl.obs.data() + s * d, d * sizeof(float));
            prefetch_bytes(rl.obs.data(), d * sizeof(float));
        }
        prefetch_bytes(&rl.meta[s], sizeof(RlScalars));
        prefetch(&rl.flags[s]);
    }

    // Copies n rows (slots[i] -> output row row0 + i) of one partition, prefetching the rows of later slots so
    // their cache and TLB misses overlap with the copies. O(n * obs_dim).
    void fill_rows(const std::size_t* slots, std::size_t n, std::size_t row0, bool llm, const BatchOut& out) const {
        if (n == 0) return;
        const std::size_t row_bytes = 2 * static_cast<std::size_t>(st_.cfg.obs_dim) * sizeof(float) + 64;
        const std::size_t ahead = std::clamp<std::size_t>(16384 / row_bytes, 1, 16);
        for (std::size_t i = 0; i < std::min(ahead, n); ++i) prefetch_row(slots[i], llm);
        const LastWrite last = llm ? LastWrite(st_.llm.written, st_.cfg.llm_capacity)
                                   : LastWrite(st_.rl.written, st_.cfg.rl_capacity);
        for (std::size_t i = 0; i < n; ++i) {
            if (i + ahead < n) prefetch_row(slots[i + ahead], llm);
            if (llm)
                fill_llm_row(slots[i], row0 + i, out, last);
            else
                fill_rl_row(slots[i], row0 + i, out, last);
        }
    }

    void fill_rl_row(std::size_t s, std::size_t row, const BatchOut& out, const LastWrite& last) const {
        const Rl& rl = st_.rl;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        const std::size_t next = s + 1 == st_.cfg.rl_capacity ? 0 : s + 1;
        std::memcpy(out.obs + row * d, rl.obs.data() + s * d, d * sizeof(float));
        std::memcpy(out.next_obs + row * d, rl.obs.data() + next * d, d * sizeof(float));
        const RlScalars& m = rl.meta[s];
        out.action[row] = m.action;
        out.reward[row] = m.reward;
        out.original_reward[row] = m.original_reward;
        out.done[row] = rl.flags[s] & kDone;
        out.truncated[row] = rl.flags[s] & kTruncated;
        out.index[row] = static_cast<std::int64_t>(last.position_of(s) << 1);
        out.from_llm[row] = false;
        out.episode[row] = m.episode;
        out.decision[row] = m.decision;
        out.improvement[row] = 0.0f;
        out.valid[row] = false;
    }

    void fill_llm_row(std::size_t s, std::size_t row, const BatchOut& out, const LastWrite& last) const {
        const Llm& lm = st_.llm;
        const std::size_t d = static_cast<std::size_t>(st_.cfg.obs_dim);
        std::memcpy(out.obs + row * d, lm.obs.data() + s * d, d * sizeof(float));
        std::memcpy(out.next_obs + row * d, lm.next_obs.data() + s * d, d * sizeof(float));
        out.action[row] = lm.action[s];
        out.reward[row] = lm.reward[s];
        out.original_reward[row] = lm.original_reward[s];
        out.done[row] = lm.flags[s] & kDone;
        out.truncated[row] = lm.flags[s] & kTruncated;
        out.index[row] = static_cast<std::int64_t>((last.position_of(s) << 1) | 1);
        out.from_llm[row] = true;
        out.episode[row] = lm.episode[s];
        out.decision[row] = lm.decision[s];
        out.improvement[row] = lm.improvement[s];
        out.valid[row] = lm.flags[s] & kValid;
    }

    mutable std::mutex mu_;
    const std::uint64_t num_actions_;  // 0: no limit; set by the constructor, never changed (read without the lock)
    State st_;
    std::vector<double> q_;           // scratch for sample(), guarded by mu_
    std::vector<std::size_t> slots_;  // scratch for sample() and update_priorities(), guarded by mu_
    std::vector<double> leaves_;      // scratch for update_priorities(), guarded by mu_
};

}  // namespace ace_hybrid
