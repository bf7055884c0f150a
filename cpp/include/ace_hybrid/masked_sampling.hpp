// Batched masked sampling, argmax and top-k over huge discrete action sets (tens of thousands of actions).
//
// Inputs are row-major float32 logits (batch x n) and a byte mask (nonzero = legal), either one row shared by
// every logits row or one mask row per logits row. Every function here:
//   - never returns a masked action (nor, for sampling, an action whose probability is zero);
//   - treats a legal -inf logit as probability 0; a row whose legal logits are all -inf, or that has no legal
//     action, is an "empty" row: an error naming the row, or, with OnEmpty::Index, a caller-given fallback index;
//   - rejects NaN and +inf at a legal position with an error naming row and column (values at masked positions
//     are never read for their value, so they may be anything);
//   - splits rows over `num_threads` std::threads (results do not depend on the thread count);
//   - reports the error of the lowest failing row, thrown on the calling thread.
// Thread safety: the functions are reentrant; concurrent calls are safe as long as they do not share an
// output buffer or an Rng (a generator is not synchronised: one owner at a time).
//
// Sampling algorithm (one pass over memory per row):
//
//   row:   | block 0 (512) | block 1 (512) | ... | block B-1 (<= 512) |
//   pass:  per block: m_b = max legal logit (L1-resident), e_i = exp((x_i - m_b) / T) into a scratch buffer,
//          s_b = sum_i e_i (double lanes).
//   then:  M = max_b m_b, w_b = s_b * exp((m_b - M) / T) (double), W = sum_b w_b,
//          target = u * W with u uniform in [0, 1) (53 bits), pick the first block whose running sum exceeds
//          target, recompute that one block's e_i with the same kernel (bit-identical values) and pick the
//          first index whose running sum exceeds the remaining target.
//   log p(a) = (x_a - M) / T - log W, in double.
//
// Precision: exp is a portable Cody-Waite + degree-7 (Cephes expf) polynomial written as a plain loop that
// GCC/Clang auto-vectorise at -O3 on baseline x86-64 (SSE2) and aarch64 (NEON), with no -ffast-math. Its relative
// error is below 3e-7 on [-87, 0] (checked in cpp/tests/test_masked_sampling.cpp against std::exp), so each
// action's sampling probability is within about 1e-6 relative of softmax over the legal logits. Weights below
// e^-87 (~1.6e-38) of their own block's maximum are flushed to zero: such an action has probability below
// 1.6e-38 and is never drawn. Block scales and all sums are double, so blocks far below the row maximum keep
// their exact relative mass. Returned log-probabilities use the same sums, accurate to ~1e-6 absolute.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rng.hpp"

namespace ace_hybrid::sampling {

// The generator is the package's one xoshiro256** (ace_hybrid::Rng, rng.hpp); SamplingGenerator in Python wraps it.

// What to do with a row that has no legal action with a finite logit.
enum class OnEmpty { Error, Index };

// Shape and policy shared by every batched call. `mask` may be nullptr (every action legal).
struct MaskedRows {
    const float* logits = nullptr;     // batch x n, row-major
    const std::uint8_t* mask = nullptr;  // n (mask_shared) or batch x n; nonzero = legal; nullptr = all legal
    bool mask_shared = true;
    std::int64_t batch = 0;
    std::int64_t n = 0;
    OnEmpty on_empty = OnEmpty::Error;
    std::int64_t fallback_index = 0;  // returned for empty rows when on_empty == Index; must be in [0, n)

    const float* row(std::int64_t r) const { return logits + r * n; }
    const std::uint8_t* mask_row(std::int64_t r) const {
        return mask == nullptr ? nullptr : (mask_shared ? mask : mask + r * n);
    }
};

namespace detail {

constexpr int kLanes = 16;        // independent double accumulators: a vectorisable sum without -ffast-math
constexpr int kBlock = 512;       // sampling block (floats): one block of logits + scratch stays in L1
constexpr int kChunk = 256;       // argmax / top-k search chunk: a vectorised test, then a scalar scan if it hits
constexpr float kExpFloor = -87.0f;  // exp(-87) ~ 1.65e-38 > FLT_MIN: the result is always a normal float
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFltMax = std::numeric_limits<float>::max();

inline bool legal_at(const std::uint8_t* m, std::int64_t i) { return m == nullptr || m[i] != 0; }

// The kernels below are plain loops that GCC and Clang auto-vectorise at -O3 on baseline x86-64 and aarch64
// without -ffast-math. Under the default -ftrapping-math a compiler will not vectorise a loop that compares
// floats or multiplies under a condition, so comparisons go through an order-preserving integer key and
// selections through integer bit masks; every float operation is executed unconditionally.

// Integer key with the order of the floats: a < b (floats, non-NaN) implies key(a) < key(b); -0.0 sorts just
// below +0.0; NaNs sort above +inf (positive sign) or below -inf (negative sign).
inline std::int32_t fkey(float v) {
    std::int32_t b;
    std::memcpy(&b, &v, sizeof b);
    return b ^ ((b >> 31) & 0x7fffffff);
}
inline float from_key(std::int32_t k) {
    const std::int32_t b = k ^ ((k >> 31) & 0x7fffffff);
    float v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}
constexpr std::int32_t kKeyNegInf = static_cast<std::int32_t>(0xff800000u ^ 0x7fffffffu);  // fkey(-inf)
constexpr std::int32_t kKeyFltMax = 0x7f7fffff;                                            // fkey(FLT_MAX)

// exp(t) for each legal i with t = (x[i] - ref) * inv_t >= kExpFloor, else 0. Requires every legal x[i] finite or
// -inf, ref finite, inv_t finite and > 0 (values at masked positions are arbitrary). The same call on the same
// data always gives bit-identical output (the sampler's rescan relies on it). Relative error < 3e-7.
template <bool HasMask>
void exp_kernel_t(const float* x, const std::uint8_t* m, int len, float ref, float inv_t, float* out) {
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
    constexpr float kLn2Hi = 0.693359375f;
    constexpr float kLn2Lo = -2.12194440e-4f;
    const std::int32_t kfloor = fkey(kExpFloor);
    for (int i = 0; i < len; ++i) {
        const float s = (x[i] - ref) * inv_t;
        std::int32_t leg = 1;
        if constexpr (HasMask) leg = static_cast<std::int32_t>(m[i] != 0);
        const std::int32_t ok = -(leg & static_cast<std::int32_t>(fkey(s) >= kfloor));  // all ones or zero
        std::int32_t tb;
        std::memcpy(&tb, &s, sizeof tb);
        tb &= ok;  // t = s where ok, else +0.0: keeps the polynomial in range
        float t;
        std::memcpy(&t, &tb, sizeof t);
        const float k = (t * kLog2e + kRound) - kRound;  // round(t / ln 2), in [-126, 0]
        float r = t - k * kLn2Hi;
        r = r - k * kLn2Lo;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = (p * r) * r + r + 1.0f;
        const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;  // 2^k, k >= -126: a normal float
        float scale;
        std::memcpy(&scale, &bits, sizeof scale);
        const float e = p * scale;
        std::int32_t eb;
        std::memcpy(&eb, &e, sizeof eb);
        eb &= ok;
        std::memcpy(out + i, &eb, sizeof eb);
    }
}
inline void exp_kernel(const float* x, const std::uint8_t* m, int len, float ref, float inv_t, float* out) {
    if (m == nullptr)
        exp_kernel_t<false>(x, m, len, ref, inv_t, out);
    else
        exp_kernel_t<true>(x, m, len, ref, inv_t, out);
}

// Max key over legal entries (kKeyNegInf if none) and min key (below kKeyNegInf only for a legal negative NaN).
inline void legal_key_range(const float* x, const std::uint8_t* m, std::int64_t len, std::int32_t& kmax,
                            std::int32_t& kmin) {
    std::int32_t mx = kKeyNegInf, mn = kKeyNegInf;
    if (m == nullptr) {
        for (std::int64_t i = 0; i < len; ++i) {
            const std::int32_t c = fkey(x[i]);
            mx = c > mx ? c : mx;
            mn = c < mn ? c : mn;
        }
    } else {
        for (std::int64_t i = 0; i < len; ++i) {
            const std::int32_t leg = -static_cast<std::int32_t>(m[i] != 0);
            const std::int32_t c = (fkey(x[i]) & leg) | (kKeyNegInf & ~leg);
            mx = c > mx ? c : mx;
            mn = c < mn ? c : mn;
        }
    }
    kmax = mx;
    kmin = mn;
}

// Max over legal entries (-inf if none); `bad` is set when a legal entry is NaN or +inf.
inline float legal_max(const float* x, const std::uint8_t* m, std::int64_t len, bool& bad) {
    std::int32_t kmax, kmin;
    legal_key_range(x, m, len, kmax, kmin);
    bad = kmax > kKeyFltMax || kmin < kKeyNegInf;
    return from_key(kmax);
}

// Whether any legal x[i] in [0, len) has key ka or kb (two keys so that -0.0 and +0.0 both match a zero).
template <bool HasMask>
bool any_key_equal_t(const float* x, const std::uint8_t* m, int len, std::int32_t ka, std::int32_t kb) {
    std::int32_t any = 0;
    for (int i = 0; i < len; ++i) {
        const std::int32_t k = fkey(x[i]);
        std::int32_t leg = 1;
        if constexpr (HasMask) leg = static_cast<std::int32_t>(m[i] != 0);
        any |= leg & (static_cast<std::int32_t>(k == ka) | static_cast<std::int32_t>(k == kb));
    }
    return any != 0;
}
inline bool any_key_equal(const float* x, const std::uint8_t* m, int len, std::int32_t ka, std::int32_t kb) {
    return m == nullptr ? any_key_equal_t<false>(x, m, len, ka, kb) : any_key_equal_t<true>(x, m, len, ka, kb);
}

// Whether any legal x[i] in [0, len) has key > kt.
template <bool HasMask>
bool any_key_above_t(const float* x, const std::uint8_t* m, int len, std::int32_t kt) {
    std::int32_t any = 0;
    for (int i = 0; i < len; ++i) {
        std::int32_t leg = 1;
        if constexpr (HasMask) leg = static_cast<std::int32_t>(m[i] != 0);
        any |= leg & static_cast<std::int32_t>(fkey(x[i]) > kt);
    }
    return any != 0;
}
inline bool any_key_above(const float* x, const std::uint8_t* m, int len, std::int32_t kt) {
    return m == nullptr ? any_key_above_t<false>(x, m, len, kt) : any_key_above_t<true>(x, m, len, kt);
}

// Sum of out[0..len) in double, lane-parallel.
inline double lane_sum(const float* v, int len) {
    double acc[kLanes] = {};
    int i = 0;
    for (; i + kLanes <= len; i += kLanes)
        for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(v[i + j]);
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    for (; i < len; ++i) s += static_cast<double>(v[i]);
    return s;
}

// First legal column holding NaN or +inf (call only after legal_max reported `bad`).
inline std::int64_t first_bad_column(const float* x, const std::uint8_t* m, std::int64_t len) {
    for (std::int64_t i = 0; i < len; ++i)
        if (legal_at(m, i) && !(x[i] <= kFltMax)) return i;
    return -1;
}

[[noreturn]] inline void throw_bad_value(std::int64_t row, std::int64_t col, float v) {
    std::ostringstream os;
    os << "logits[" << row << ", " << col << "] = " << v << " at a legal action: legal logits must be finite or -inf";
    throw std::invalid_argument(os.str());
}

[[noreturn]] inline void throw_empty(std::int64_t row) {
    std::ostringstream os;
    os << "row " << row << " has no legal action with a finite logit (all masked or all -inf); "
       << "pass on_empty=\"index\" with a fallback_index to return a fallback instead";
    throw std::invalid_argument(os.str());
}

// Calls fn(r0, r1) over [0, batch) split in contiguous chunks on up to num_threads threads (the caller's thread
// runs the first chunk). If any chunk throws, the exception of the lowest chunk is rethrown after all joined;
// each chunk stops at its first failing row, so that is the lowest failing row overall.
template <typename Fn>
void parallel_rows(std::int64_t batch, int num_threads, Fn&& fn) {
    const std::int64_t nt = std::max<std::int64_t>(1, std::min<std::int64_t>(num_threads, batch));
    if (nt <= 1) {
        fn(std::int64_t{0}, batch);
        return;
    }
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(nt));
    std::vector<std::thread> workers;
    workers.reserve(static_cast<std::size_t>(nt - 1));
    auto run = [&](std::int64_t t) {
        const std::int64_t r0 = batch * t / nt, r1 = batch * (t + 1) / nt;
        try {
            fn(r0, r1);
        } catch (...) {
            errors[static_cast<std::size_t>(t)] = std::current_exception();
        }
    };
    try {
        for (std::int64_t t = 1; t < nt; ++t) workers.emplace_back(run, t);
    } catch (...) {  // could not start a thread: finish the remaining chunks here
        for (std::int64_t t = static_cast<std::int64_t>(workers.size()) + 1; t < nt; ++t) run(t);
    }
    run(0);
    for (auto& w : workers) w.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

// Scratch for one sampling thread.
struct SampleScratch {
    std::vector<float> bmax;
    std::vector<double> bsum;
    std::vector<float> ebuf;
    explicit SampleScratch(std::int64_t n)
        : bmax(static_cast<std::size_t>((n + kBlock - 1) / kBlock)),
          bsum(static_cast<std::size_t>((n + kBlock - 1) / kBlock)),
          ebuf(kBlock) {}
};

// Samples one row. Returns false for an empty row. Throws on NaN / +inf at a legal position.
inline bool sample_row(const float* x, const std::uint8_t* m, std::int64_t n, std::int64_t row, float inv_t,
                       double u, SampleScratch& sc, std::int64_t& action, double& log_prob) {
    const std::int64_t nb = (n + kBlock - 1) / kBlock;
    float gmax = -kInf;
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t off = b * kBlock;
        const int len = static_cast<int>(std::min<std::int64_t>(kBlock, n - off));
        const std::uint8_t* mb = m == nullptr ? nullptr : m + off;
        bool bad = false;
        const float bm = legal_max(x + off, mb, len, bad);
        if (bad) {
            const std::int64_t c = off + first_bad_column(x + off, mb, len);
            throw_bad_value(row, c, x[c]);
        }
        sc.bmax[static_cast<std::size_t>(b)] = bm;
        if (bm == -kInf) {
            sc.bsum[static_cast<std::size_t>(b)] = 0.0;
            continue;
        }
        exp_kernel(x + off, mb, len, bm, inv_t, sc.ebuf.data());
        sc.bsum[static_cast<std::size_t>(b)] = lane_sum(sc.ebuf.data(), len);
        gmax = bm > gmax ? bm : gmax;
    }
    if (gmax == -kInf) return false;
    // Block weights relative to the row maximum, in double. bsum >= 1 for any block with a finite max.
    const double inv_td = static_cast<double>(inv_t);
    double total = 0.0;
    for (std::int64_t b = 0; b < nb; ++b) {
        const auto bi = static_cast<std::size_t>(b);
        if (sc.bsum[bi] > 0.0) {
            const double scale = std::exp((static_cast<double>(sc.bmax[bi]) - gmax) * inv_td);
            sc.bsum[bi] *= scale;  // now the block's weight w_b
            total += sc.bsum[bi];
        }
    }
    const double target = u * total;
    std::int64_t chosen_block = -1, last_positive = -1;
    double before = 0.0, before_last = 0.0, cum = 0.0;
    for (std::int64_t b = 0; b < nb; ++b) {
        const double w = sc.bsum[static_cast<std::size_t>(b)];
        if (w <= 0.0) continue;
        last_positive = b;
        before_last = cum;
        if (target < cum + w) {
            chosen_block = b;
            before = cum;
            break;
        }
        cum += w;
    }
    if (chosen_block < 0) {  // u * total rounded up to the total: take the last block with mass
        chosen_block = last_positive;
        before = before_last;
    }
    const std::int64_t off = chosen_block * kBlock;
    const int len = static_cast<int>(std::min<std::int64_t>(kBlock, n - off));
    const std::uint8_t* mb = m == nullptr ? nullptr : m + off;
    const float bm = sc.bmax[static_cast<std::size_t>(chosen_block)];
    exp_kernel(x + off, mb, len, bm, inv_t, sc.ebuf.data());
    const double scale = std::exp((static_cast<double>(bm) - gmax) * inv_td);
    const double local = (target - before) / scale;
    std::int64_t pick = -1, last_nz = -1;
    double c = 0.0;
    for (int i = 0; i < len; ++i) {
        const float e = sc.ebuf[static_cast<std::size_t>(i)];
        if (e <= 0.0f) continue;
        last_nz = i;
        c += static_cast<double>(e);
        if (local < c) {
            pick = i;
            break;
        }
    }
    if (pick < 0) pick = last_nz;  // rounding: the remaining target reached the block's end
    action = off + pick;
    log_prob = (static_cast<double>(x[action]) - gmax) * inv_td - std::log(total);
    return true;
}

// Argmax of one row (lowest index among ties; -0.0 ties with +0.0). Returns false for an empty row.
// Two vectorised passes: the legal maximum, then a chunked search for its first occurrence.
inline bool argmax_row(const float* x, const std::uint8_t* m, std::int64_t n, std::int64_t row,
                       std::int64_t& action) {
    bool bad = false;
    const float best = legal_max(x, m, n, bad);
    if (bad) {
        const std::int64_t c = first_bad_column(x, m, n);
        throw_bad_value(row, c, x[c]);
    }
    if (best == -kInf) return false;
    const std::int32_t ka = fkey(best), kb = best == 0.0f ? fkey(-best) : ka;
    for (std::int64_t off = 0; off < n; off += kChunk) {
        const int len = static_cast<int>(std::min<std::int64_t>(kChunk, n - off));
        const std::uint8_t* mc = m == nullptr ? nullptr : m + off;
        if (!any_key_equal(x + off, mc, len, ka, kb)) continue;
        for (int i = 0; i < len; ++i)
            if (legal_at(mc, i) && x[off + i] == best) {
                action = off + i;
                return true;
            }
    }
    return false;  // unreachable: the maximum is attained at a legal index
}

// Candidate of top-k: better = larger value, then lower index.
struct Cand {
    float v;
    std::int64_t i;
};
inline bool better(const Cand& a, const Cand& b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

// Top-k of one row into idx/val (k slots, best first). Returns the number of candidates found (< k if the row
// has fewer legal finite logits; the remaining slots are untouched). Throws on NaN / +inf at a legal position.
inline std::int64_t topk_row(const float* x, const std::uint8_t* m, std::int64_t n, std::int64_t row,
                             std::int64_t k, std::vector<Cand>& heap, std::int64_t* idx, float* val) {
    bool bad = false;
    const float gmax = legal_max(x, m, n, bad);
    if (bad) {
        const std::int64_t c = first_bad_column(x, m, n);
        throw_bad_value(row, c, x[c]);
    }
    if (gmax == -kInf) return 0;
    heap.clear();
    // std heap with `better` as "less": the top is the worst kept candidate. Scanning in index order, a new
    // candidate replaces the worst only if strictly larger (an equal value has a higher index, so it loses).
    for (std::int64_t off = 0; off < n; off += kChunk) {
        const int len = static_cast<int>(std::min<std::int64_t>(kChunk, n - off));
        const std::uint8_t* mc = m == nullptr ? nullptr : m + off;
        // Once k candidates are kept, skip chunks with nothing above the worst kept one (vectorised test).
        if (static_cast<std::int64_t>(heap.size()) == k && !any_key_above(x + off, mc, len, fkey(heap.front().v)))
            continue;
        for (int j = 0; j < len; ++j) {
            if (!legal_at(mc, j)) continue;
            const float v = x[off + j];
            if (v == -kInf) continue;
            if (static_cast<std::int64_t>(heap.size()) < k) {
                heap.push_back({v, off + j});
                std::push_heap(heap.begin(), heap.end(), better);
            } else if (v > heap.front().v) {
                std::pop_heap(heap.begin(), heap.end(), better);
                heap.back() = {v, off + j};
                std::push_heap(heap.begin(), heap.end(), better);
            }
        }
    }
    std::sort(heap.begin(), heap.end(), better);
    for (std::size_t j = 0; j < heap.size(); ++j) {
        idx[j] = heap[j].i;
        val[j] = heap[j].v;
    }
    return static_cast<std::int64_t>(heap.size());
}

inline void check_rows(const MaskedRows& rows) {
    if (rows.batch < 0) throw std::invalid_argument("batch must be >= 0");
    if (rows.n <= 0 || rows.n > std::numeric_limits<std::int32_t>::max()) {
        std::ostringstream os;
        os << "number of actions n = " << rows.n << " out of range [1, " << std::numeric_limits<std::int32_t>::max()
           << "]";
        throw std::invalid_argument(os.str());
    }
    if (rows.batch > 0 && rows.logits == nullptr) throw std::invalid_argument("logits must not be null");
    if (rows.on_empty == OnEmpty::Index && (rows.fallback_index < 0 || rows.fallback_index >= rows.n)) {
        std::ostringstream os;
        os << "fallback_index " << rows.fallback_index << " out of range [0, " << rows.n << ")";
        throw std::out_of_range(os.str());
    }
}

}  // namespace detail

// Number of threads used when the caller passes 0 ("auto"): 1 for small work, else up to 4 and the hardware.
inline int auto_threads(std::int64_t batch, std::int64_t n) {
    if (batch < 2 || batch * n < (std::int64_t{1} << 20)) return 1;
    const unsigned hw = std::thread::hardware_concurrency();
    return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>({4, hw == 0 ? 1 : hw, batch})));
}

// Draws one action per row with probability softmax(logits / temperature) over the legal actions.
//   uniforms:  batch values in [0, 1), one per row (draw them from an Rng with uniform() in row order;
//              taking them as input keeps the generator on the caller's thread and the result independent of
//              the thread count).
//   actions:   batch outputs; log_probs: batch outputs (log-probability of the chosen action, double);
//   empty:     batch outputs, 1 where the row was empty and fallback_index was returned (log_prob 0).
// Cost: O(batch * n) time, one read of the logits plus one rescan of a 512-wide block per row; O(n / 512)
// scratch per thread. Throws std::invalid_argument (empty row with OnEmpty::Error, NaN or +inf at a legal
// position, temperature outside [1e-30, 1e30]) or std::out_of_range (fallback_index).
// See the file comment for precision.
inline void masked_sample(const MaskedRows& rows, const double* uniforms, float temperature, std::int64_t* actions,
                          double* log_probs, std::uint8_t* empty, int num_threads = 1) {
    detail::check_rows(rows);
    if (!(temperature >= 1e-30f && temperature <= 1e30f)) {
        std::ostringstream os;
        os << "temperature = " << temperature << " out of range [1e-30, 1e30]";
        throw std::invalid_argument(os.str());
    }
    const float inv_t = 1.0f / temperature;
    detail::parallel_rows(rows.batch, num_threads, [&](std::int64_t r0, std::int64_t r1) {
        detail::SampleScratch sc(rows.n);
        for (std::int64_t r = r0; r < r1; ++r) {
            std::int64_t a = 0;
            double lp = 0.0;
            const bool ok = detail::sample_row(rows.row(r), rows.mask_row(r), rows.n, r, inv_t, uniforms[r], sc, a, lp);
            if (!ok) {
                if (rows.on_empty == OnEmpty::Error) detail::throw_empty(r);
                a = rows.fallback_index;
                lp = 0.0;
            }
            actions[r] = a;
            log_probs[r] = lp;
            empty[r] = ok ? 0 : 1;
        }
    });
}

// Index of the largest legal logit per row; ties go to the lowest index. Empty rows as in masked_sample.
// Cost: O(batch * n), one vectorised pass. Same errors as masked_sample (no temperature).
inline void masked_argmax(const MaskedRows& rows, std::int64_t* actions, int num_threads = 1) {
    detail::check_rows(rows);
    detail::parallel_rows(rows.batch, num_threads, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
            std::int64_t a = 0;
            if (!detail::argmax_row(rows.row(r), rows.mask_row(r), rows.n, r, a)) {
                if (rows.on_empty == OnEmpty::Error) detail::throw_empty(r);
                a = rows.fallback_index;
            }
            actions[r] = a;
        }
    });
}

// The k legal actions with the largest finite logits per row, best first; ties go to the lowest index.
// indices / values: batch x k outputs. A row with fewer than k legal finite logits is an error naming the row
// (OnEmpty::Error), or (OnEmpty::Index) its missing slots hold fallback_index with value -inf.
// Cost: O(batch * n log k) worst case, O(batch * (n + k log k)) typical (a heap of k, replaced only when beaten).
inline void masked_topk(const MaskedRows& rows, std::int64_t k, std::int64_t* indices, float* values,
                        int num_threads = 1) {
    detail::check_rows(rows);
    if (k < 1 || k > rows.n) {
        std::ostringstream os;
        os << "k = " << k << " out of range [1, " << rows.n << "]";
        throw std::invalid_argument(os.str());
    }
    detail::parallel_rows(rows.batch, num_threads, [&](std::int64_t r0, std::int64_t r1) {
        std::vector<detail::Cand> heap;
        heap.reserve(static_cast<std::size_t>(k));
        for (std::int64_t r = r0; r < r1; ++r) {
            std::int64_t* idx = indices + r * k;
            float* val = values + r * k;
            const std::int64_t found = detail::topk_row(rows.row(r), rows.mask_row(r), rows.n, r, k, heap, idx, val);
            if (found < k) {
                if (rows.on_empty == OnEmpty::Error) {
                    std::ostringstream os;
                    os << "row " << r << " has " << found << " legal action(s) with a finite logit, fewer than k = "
                       << k << "; pass on_empty=\"index\" to fill the missing slots with fallback_index";
                    throw std::invalid_argument(os.str());
                }
                for (std::int64_t j = found; j < k; ++j) {
                    idx[j] = rows.fallback_index;
                    val[j] = -detail::kInf;
                }
            }
        }
    });
}

}  // namespace ace_hybrid::sampling
