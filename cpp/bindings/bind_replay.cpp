// Binding of the mixed prioritised replay (cpp/include/ace_hybrid/replay.hpp) as ace_hybrid._core.MixedReplay.
// The Python facade ace_hybrid.replay.MixedReplayBuffer subclasses it (add_* and update_* are used as bound here,
// with no Python layer in between, because they are on the actor's and learner's hot paths).
//
// GIL and lock discipline: every call that takes the buffer's mutex releases the GIL first, so a thread waiting
// for the mutex never holds the GIL (no deadlock between the actor and learner threads). Output arrays are
// allocated with the GIL held, then filled with it released. Exceptions thrown inside a released region
// propagate after the gil_scoped_release destructor has re-acquired the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <string>
#include <system_error>
#include <vector>

#include "ace_hybrid/replay.hpp"
#include "bindings.hpp"
#include "checks.hpp"

namespace py = pybind11;

namespace ace_hybrid {
namespace {

using checks::carray;
constexpr std::int64_t kMaxOutFloats = std::int64_t(1) << 31;  // per output observation array
constexpr std::int64_t kMaxAction = std::numeric_limits<std::int64_t>::max();

// An integer column as int64 (any int64 value; the caller or the core checks ranges).
carray<std::int64_t> int64_column(const py::array& a, const char* name) {
    using lim = std::numeric_limits<std::int64_t>;
    return checks::require_integer_array<std::int64_t>(a, name, lim::min(), lim::max());
}

// A (n,) boolean column: bools, or integers holding only 0 and 1.
carray<bool> bool_column(const py::array& a, const char* name) {
    return checks::require_integer_array<bool>(a, name, 0, 1, /*allow_bool=*/true);
}

// Recycled memory for batch outputs. Every output column of a batch lives in one block; the numpy arrays keep the
// block alive through a shared capsule, and when the last of them is freed the block returns here instead of to
// malloc. A learner that drops each batch before sampling the next then reuses the same pages: a fresh multi-MB
// allocation would otherwise be a new mmap whose page faults and zeroing cost about a third of sample() at
// D = 1300. Arrays are still new objects each call (callers may keep them); nothing is copied.
class BlockPool {
public:
    static constexpr std::size_t kAlign = 64;
    static constexpr std::size_t kMaxBlocks = 8;
    static constexpr std::size_t kMaxCachedBlock = std::size_t(64) << 20;

    static BlockPool& instance() {
        static BlockPool* pool = new BlockPool();  // never destroyed: capsules may be freed at interpreter exit
        return *pool;
    }

    // A block of at least `bytes` (reuses a cached one of at most twice the size).
    std::pair<void*, std::size_t> acquire(std::size_t bytes) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            for (std::size_t i = 0; i < free_.size(); ++i) {
                if (free_[i].second >= bytes && free_[i].second <= 2 * bytes) {
                    auto b = free_[i];
                    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
                    return b;
                }
            }
        }
        return {::operator new(bytes, std::align_val_t(kAlign)), bytes};
    }

    void release(void* p, std::size_t bytes) {
        if (bytes <= kMaxCachedBlock) {
            std::lock_guard<std::mutex> lk(mu_);
            if (free_.size() < kMaxBlocks) {
                free_.emplace_back(p, bytes);
                return;
            }
        }
        ::operator delete(p, std::align_val_t(kAlign));
    }

private:
    std::mutex mu_;
    std::vector<std::pair<void*, std::size_t>> free_;
};

struct PooledBlock {
    void* ptr;
    std::size_t bytes;
};

// Output columns of a batch of n rows, allocated with the GIL held.
struct BatchArrays {
    py::array_t<float> obs, reward, next_obs, weight, original_reward, improvement;
    py::array_t<std::int64_t> action, index, episode, decision;
    py::array_t<bool> done, truncated, from_llm, valid;

    BatchArrays(py::ssize_t n, py::ssize_t d) {
        const auto un = static_cast<std::size_t>(n), ud = static_cast<std::size_t>(d);
        constexpr std::size_t A = BlockPool::kAlign;
        auto round_up = [](std::size_t x) { return (x + A - 1) / A * A; };
        const std::size_t obs_bytes = round_up(std::max<std::size_t>(un * ud * sizeof(float), 1));
        const std::size_t f_bytes = round_up(std::max<std::size_t>(un * sizeof(float), 1));
        const std::size_t i_bytes = round_up(std::max<std::size_t>(un * sizeof(std::int64_t), 1));
        const std::size_t b_bytes = round_up(std::max<std::size_t>(un, 1));
        const std::size_t total = 2 * obs_bytes + 4 * f_bytes + 4 * i_bytes + 4 * b_bytes;
        auto [ptr, bytes] = BlockPool::instance().acquire(total);
        auto* block = new PooledBlock{ptr, bytes};
        py::capsule owner(block, [](void* p) {
            auto* b = static_cast<PooledBlock*>(p);
            BlockPool::instance().release(b->ptr, b->bytes);
            delete b;
        });
        char* cursor = static_cast<char*>(ptr);
        auto take = [&cursor](std::size_t nbytes) {
            char* p = cursor;
            cursor += nbytes;
            return p;
        };
        obs = py::array_t<float>({n, d}, reinterpret_cast<float*>(take(obs_bytes)), owner);
        next_obs = py::array_t<float>({n, d}, reinterpret_cast<float*>(take(obs_bytes)), owner);
        reward = py::array_t<float>(n, reinterpret_cast<float*>(take(f_bytes)), owner);
        weight = py::array_t<float>(n, reinterpret_cast<float*>(take(f_bytes)), owner);
        original_reward = py::array_t<float>(n, reinterpret_cast<float*>(take(f_bytes)), owner);
        improvement = py::array_t<float>(n, reinterpret_cast<float*>(take(f_bytes)), owner);
        action = py::array_t<std::int64_t>(n, reinterpret_cast<std::int64_t*>(take(i_bytes)), owner);
        index = py::array_t<std::int64_t>(n, reinterpret_cast<std::int64_t*>(take(i_bytes)), owner);
        episode = py::array_t<std::int64_t>(n, reinterpret_cast<std::int64_t*>(take(i_bytes)), owner);
        decision = py::array_t<std::int64_t>(n, reinterpret_cast<std::int64_t*>(take(i_bytes)), owner);
        done = py::array_t<bool>(n, reinterpret_cast<bool*>(take(b_bytes)), owner);
        truncated = py::array_t<bool>(n, reinterpret_cast<bool*>(take(b_bytes)), owner);
        from_llm = py::array_t<bool>(n, reinterpret_cast<bool*>(take(b_bytes)), owner);
        valid = py::array_t<bool>(n, reinterpret_cast<bool*>(take(b_bytes)), owner);
    }

    BatchOut out(std::size_t d) {
        return BatchOut{d,
                        obs.mutable_data(),
                        action.mutable_data(),
                        reward.mutable_data(),
                        next_obs.mutable_data(),
                        done.mutable_data(),
                        truncated.mutable_data(),
                        weight.mutable_data(),
                        index.mutable_data(),
                        from_llm.mutable_data(),
                        original_reward.mutable_data(),
                        episode.mutable_data(),
                        decision.mutable_data(),
                        improvement.mutable_data(),
                        valid.mutable_data()};
    }

    // Field order of ace_hybrid.replay.ReplayBatch.
    py::tuple as_tuple() const {
        return py::make_tuple(obs, action, reward, next_obs, done, truncated, weight, index, from_llm,
                              original_reward, episode, decision, improvement, valid);
    }
};

void check_rows(std::int64_t n, std::int64_t d, const char* name) {
    if (n * d > kMaxOutFloats) {
        std::ostringstream os;
        os << name << " = " << n << " rows of obs_dim " << d << " would need " << n * d
           << " floats per observation array, more than the limit " << kMaxOutFloats;
        throw std::invalid_argument(os.str());
    }
}

// Rethrows a std::system_error as Python OSError(errno, message) (FileNotFoundError etc. by errno).
[[noreturn]] void raise_os_error(const std::system_error& e) {
    py::object err = py::module_::import("builtins").attr("OSError")(e.code().value(), std::string(e.what()));
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    throw py::error_already_set();
}

struct BatchInputs {
    carray<float> obs;
    carray<double> reward;  // double in, checked, then narrowed: a float32 overflow is a ValueError, not a cast
    carray<float> next_obs;
    carray<double> improvement;
    carray<std::int64_t> action, episode, decision;
    carray<bool> done, truncated, valid;
};

// Checks and converts the column arrays of an add_*_batch call; returns n.
py::ssize_t check_batch_inputs(BatchInputs& b, std::size_t d, bool llm) {
    checks::require_ndim(b.obs, "obs", 2);
    const py::ssize_t n = b.obs.shape(0);
    checks::require_dim(b.obs, "obs", 1, static_cast<py::ssize_t>(d));
    checks::require_ndim(b.next_obs, "next_obs", 2);
    checks::require_dim(b.next_obs, "next_obs", 0, n);
    checks::require_dim(b.next_obs, "next_obs", 1, static_cast<py::ssize_t>(d));
    auto vec = [n](const py::array& a, const char* name) {
        checks::require_ndim(a, name, 1);
        checks::require_dim(a, name, 0, n);
    };
    vec(b.action, "action");
    vec(b.reward, "reward");
    vec(b.done, "done");
    vec(b.truncated, "truncated");
    vec(b.episode, "episode");
    vec(b.decision, "decision");
    if (llm) {
        vec(b.improvement, "improvement");
        vec(b.valid, "valid");
    }
    return n;
}

// Finite values that fit float32, narrowed into out.
void narrow_column(const carray<double>& a, const char* name, std::vector<float>& out) {
    const double* p = a.data();
    out.resize(static_cast<std::size_t>(a.size()));
    for (py::ssize_t i = 0; i < a.size(); ++i) {
        const float f = static_cast<float>(p[i]);
        if (!std::isfinite(p[i]) || !std::isfinite(f)) {
            std::ostringstream os;
            os << name << "[" << i << "] = " << p[i] << " must be a finite float32 value";
            throw std::invalid_argument(os.str());
        }
        out[static_cast<std::size_t>(i)] = f;
    }
}

TransitionsIn transitions_of(const BatchInputs& b, std::size_t n, std::size_t d, bool llm,
                             std::vector<float>& reward, std::vector<float>& improvement) {
    narrow_column(b.reward, "reward", reward);
    if (llm) narrow_column(b.improvement, "improvement", improvement);
    TransitionsIn in;
    in.n = n;
    in.obs_dim = d;
    in.obs = b.obs.data();
    in.action = b.action.data();
    in.reward = reward.data();
    in.next_obs = b.next_obs.data();
    in.done = b.done.data();
    in.truncated = b.truncated.data();
    in.episode = b.episode.data();
    in.decision = b.decision.data();
    if (llm) {
        in.improvement = improvement.data();
        in.valid = b.valid.data();
    }
    return in;
}

py::array_t<std::int64_t> add_batch(MixedReplay& self, bool llm, const carray<float>& obs, const py::array& action,
                                    const carray<double>& reward, const carray<float>& next_obs, const py::array& done,
                                    const py::array& truncated, const py::array& episode, const py::array& decision,
                                    const carray<double>& improvement, const py::array& valid) {
    BatchInputs b{obs,
                  reward,
                  next_obs,
                  improvement,
                  checks::require_integer_array<std::int64_t>(action, "action", 0, kMaxAction),
                  int64_column(episode, "episode"),  // ranges checked by the core, naming the row
                  int64_column(decision, "decision"),
                  bool_column(done, "done"),
                  bool_column(truncated, "truncated"),
                  llm ? bool_column(valid, "valid") : carray<bool>(0)};
    const std::size_t d = static_cast<std::size_t>(self.config().obs_dim);
    const py::ssize_t n = check_batch_inputs(b, d, llm);
    py::array_t<std::int64_t> handles(n);
    std::vector<float> reward32, improvement32;
    const TransitionsIn in = transitions_of(b, static_cast<std::size_t>(n), d, llm, reward32, improvement32);
    std::int64_t* out = handles.mutable_data();
    {
        py::gil_scoped_release release;
        if (llm)
            self.add_llm(in, out);
        else
            self.add_rl(in, out);
    }
    return handles;
}

std::int64_t add_one(MixedReplay& self, bool llm, const carray<float>& obs, std::int64_t action, double reward,
                     const carray<float>& next_obs, bool done, bool truncated, std::int64_t episode,
                     std::int64_t decision, double improvement, bool valid) {
    const std::size_t d = static_cast<std::size_t>(self.config().obs_dim);
    checks::require_ndim(obs, "obs", 1);
    checks::require_dim(obs, "obs", 0, static_cast<py::ssize_t>(d));
    checks::require_ndim(next_obs, "next_obs", 1);
    checks::require_dim(next_obs, "next_obs", 0, static_cast<py::ssize_t>(d));
    checks::require_in<std::int64_t>(action, 0, kMaxAction, "action");
    const float r = static_cast<float>(reward);
    if (!std::isfinite(reward) || !std::isfinite(r)) {
        std::ostringstream os;
        os << "reward = " << reward << " must be a finite float32 value";
        throw std::invalid_argument(os.str());
    }
    const float imp = static_cast<float>(improvement);
    if (!std::isfinite(improvement) || !std::isfinite(imp)) {
        std::ostringstream os;
        os << "improvement = " << improvement << " must be a finite float32 value";
        throw std::invalid_argument(os.str());
    }
    TransitionsIn in;
    in.n = 1;
    in.obs_dim = d;
    in.obs = obs.data();
    in.action = &action;
    in.reward = &r;
    in.next_obs = next_obs.data();
    in.done = &done;
    in.truncated = &truncated;
    in.episode = &episode;
    in.decision = &decision;
    in.improvement = &imp;
    in.valid = &valid;
    std::int64_t handle = -1;
    {
        py::gil_scoped_release release;
        if (llm)
            self.add_llm(in, &handle);
        else
            self.add_rl(in, &handle);
    }
    return handle;
}

carray<std::int64_t> handles_of(const py::array& index) {
    auto h = int64_column(index, "index");  // a negative or unissued handle is an IndexError from the core
    checks::require_ndim(h, "index", 1);
    return h;
}

}  // namespace

void bind_replay(py::module_& m) {
    py::class_<MixedReplay> cls(m, "MixedReplay", R"doc(
Mixed prioritised replay (C++ core of ace_hybrid.replay.MixedReplayBuffer; use that class).

Two FIFO partitions: RL transitions (each observation stored once; a transition's next observation is the
next stored observation of its episode) sampled by proportional prioritised replay (priority^alpha), and
validated transitions (LLM refinements, tutor decisions) sampled with probability proportional to
I_v * exp((r_hat - r) / tau) (ACE, Eq. 8). The C++ core calls the validated partition "llm" (add_llm,
ReplayConfig::llm_capacity, the file's llm.* columns); Python sees validated_* names.
Thread-safe for concurrent writer and sampler threads; batched calls release the GIL.
)doc");
    cls.def(py::init([](std::int64_t obs_dim, std::int64_t rl_capacity, std::int64_t validated_capacity, double alpha,
                        double beta, double tau, const py::object& seed, std::optional<std::int64_t> num_actions) {
                checks::require_in<std::int64_t>(obs_dim, 1, static_cast<std::int64_t>(kMaxObsDim), "obs_dim");
                checks::require_in<std::int64_t>(rl_capacity, 3, static_cast<std::int64_t>(kMaxCapacity),
                                                 "rl_capacity");
                checks::require_in<std::int64_t>(validated_capacity, 1, static_cast<std::int64_t>(kMaxCapacity),
                                                 "validated_capacity");
                ReplayConfig cfg;
                cfg.obs_dim = static_cast<std::uint64_t>(obs_dim);
                cfg.rl_capacity = static_cast<std::uint64_t>(rl_capacity);
                cfg.llm_capacity = static_cast<std::uint64_t>(validated_capacity);
                cfg.alpha = alpha;
                cfg.beta = beta;
                cfg.tau = tau;
                validate_config(cfg);  // before allocating
                const std::uint64_t s = checks::require_uint64(seed, "seed");
                if (num_actions)
                    checks::require_in<std::int64_t>(*num_actions, 1, kMaxAction, "num_actions");
                const std::uint64_t a = num_actions ? static_cast<std::uint64_t>(*num_actions) : 0;
                py::gil_scoped_release release;
                return new MixedReplay(cfg, s, a);
            }),
            py::arg("obs_dim"), py::arg("rl_capacity"), py::arg("validated_capacity"), py::kw_only(),
            py::arg("alpha") = 0.6, py::arg("beta") = 0.25, py::arg("tau") = 1.0, py::arg("seed") = 0,
            py::arg("num_actions") = py::none(),
            "Allocates both partitions. obs_dim >= 1, rl_capacity >= 3 observation slots, validated_capacity >= 1 items, "
            "alpha in [0, 1] (priority exponent), beta in [0, 1] (validated fraction of a batch), tau in [1e-6, 1e6] "
            "(Eq. 8 temperature), seed in [0, 2^64), num_actions None (any action >= 0) or in [1, 2^63 - 1] (adds "
            "and loaded files must hold actions in [0, num_actions)).");

    cls.def(
        "add_rl",
        [](MixedReplay& self, const carray<float>& obs, std::int64_t action, double reward,
           const carray<float>& next_obs, bool done, bool truncated, std::int64_t episode, std::int64_t decision) {
            return add_one(self, false, obs, action, reward, next_obs, done, truncated, episode, decision, 0.0, false);
        },
        py::arg("obs"), py::arg("action"), py::arg("reward"), py::arg("next_obs"), py::arg("done").noconvert(),
        py::arg("truncated").noconvert(), py::arg("episode"), py::arg("decision"),
        "Adds one RL transition; returns its handle (int). obs, next_obs: (obs_dim,) float32; action >= 0 (and < "
        "num_actions if set); "
        "episode, decision in [0, 2^31 - 1] (decision: the index of the agent's decision within its episode); "
        "done, truncated: bool (or numpy.bool_). Continues the stored episode (one new observation slot) when "
        "episode matches, decision is the previous decision + 1, the previous transition was neither done nor "
        "truncated and obs equals the stored next observation bit for bit; otherwise uses two new slots. "
        "OverflowError, storing nothing, if the partition's write counter would pass 2^62 (the positions a handle "
        "can address).");
    cls.def(
        "add_rl_batch",
        [](MixedReplay& self, const carray<float>& obs, const py::array& action, const carray<double>& reward,
           const carray<float>& next_obs, const py::array& done, const py::array& truncated,
           const py::array& episode, const py::array& decision) {
            return add_batch(self, false, obs, action, reward, next_obs, done, truncated, episode, decision,
                             carray<double>(0), py::array());
        },
        py::arg("obs"), py::arg("action"), py::arg("reward"), py::arg("next_obs"), py::arg("done"),
        py::arg("truncated"), py::arg("episode"), py::arg("decision"),
        "Adds n RL transitions in order (same rules as add_rl); returns their handles, (n,) int64. obs, next_obs: "
        "(n, obs_dim) float32; action, episode, decision: (n,) integer; reward: (n,) float; done, truncated: (n,) "
        "bool. Nothing is stored if any argument is invalid.");
    cls.def(
        "add_validated",
        [](MixedReplay& self, const carray<float>& obs, std::int64_t action, double reward,
           const carray<float>& next_obs, bool done, bool truncated, std::int64_t episode, std::int64_t decision,
           double improvement, bool valid) {
            return add_one(self, true, obs, action, reward, next_obs, done, truncated, episode, decision, improvement,
                           valid);
        },
        py::arg("obs"), py::arg("action"), py::arg("reward"), py::arg("next_obs"), py::arg("done").noconvert(),
        py::arg("truncated").noconvert(), py::arg("episode"), py::arg("decision"), py::arg("improvement"),
        py::arg("valid").noconvert(),
        "Adds one validated transition (an LLM refinement, a tutor decision) with its improvement r_hat - r and "
        "validation flag I_v; returns its "
        "handle. Sampled with weight valid * exp(clip(improvement / tau, -60, 60)); invalid items are never "
        "sampled.");
    cls.def(
        "add_validated_batch",
        [](MixedReplay& self, const carray<float>& obs, const py::array& action, const carray<double>& reward,
           const carray<float>& next_obs, const py::array& done, const py::array& truncated,
           const py::array& episode, const py::array& decision, const carray<double>& improvement,
           const py::array& valid) {
            return add_batch(self, true, obs, action, reward, next_obs, done, truncated, episode, decision, improvement,
                             valid);
        },
        py::arg("obs"), py::arg("action"), py::arg("reward"), py::arg("next_obs"), py::arg("done"),
        py::arg("truncated"), py::arg("episode"), py::arg("decision"), py::arg("improvement"), py::arg("valid"),
        "Adds n validated transitions (columns as in add_rl_batch plus improvement (n,) float and valid (n,) bool); "
        "returns their handles, (n,) int64.");

    cls.def(
        "_sample",
        [](MixedReplay& self, std::int64_t batch_size, double is_exponent) {
            checks::require_in<std::int64_t>(batch_size, 1, static_cast<std::int64_t>(kMaxBatch), "batch_size");
            checks::require_in<double>(is_exponent, 0.0, 1.0, "is_exponent");
            const auto d = static_cast<std::int64_t>(self.config().obs_dim);
            check_rows(batch_size, d, "batch_size");
            BatchArrays arrays(batch_size, d);
            const BatchOut out = arrays.out(static_cast<std::size_t>(d));
            {
                py::gil_scoped_release release;
                self.sample(static_cast<std::size_t>(batch_size), is_exponent, out);
            }
            return arrays.as_tuple();
        },
        py::arg("batch_size"), py::arg("is_exponent") = 0.4,
        "Samples a batch; returns the 14 columns of ReplayBatch as a tuple (use MixedReplayBuffer.sample).");
    cls.def(
        "_get",
        [](const MixedReplay& self, const py::array& index) {
            auto h = handles_of(index);
            const auto d = static_cast<std::int64_t>(self.config().obs_dim);
            check_rows(h.shape(0), d, "len(index)");
            BatchArrays arrays(h.shape(0), d);
            const BatchOut out = arrays.out(static_cast<std::size_t>(d));
            {
                py::gil_scoped_release release;
                self.get(h.data(), static_cast<std::size_t>(h.shape(0)), out);
            }
            return arrays.as_tuple();
        },
        py::arg("index"), "Copies the items named by handles; the 14 ReplayBatch columns as a tuple.");
    cls.def(
        "update_priorities",
        [](MixedReplay& self, const py::array& index, const carray<double>& priority) {
            auto h = handles_of(index);
            checks::require_ndim(priority, "priority", 1);
            checks::require_dim(priority, "priority", 0, h.shape(0));
            py::gil_scoped_release release;
            return self.update_priorities(h.data(), priority.data(), static_cast<std::size_t>(h.shape(0)));
        },
        py::arg("index"), py::arg("priority"),
        "Sets the priorities (n,) float (finite, >= 0, stored as float32) of the RL items named by index (n,) "
        "int64, in order (a repeated handle keeps its last priority). Returns how many were applied: stale "
        "handles (slot overwritten since sampling) and validated handles (Eq. 8 weights do not use priorities) are "
        "skipped. Raises ValueError / IndexError, changing nothing, on a bad priority or a never-issued handle.");
    cls.def(
        "update_rewards",
        [](MixedReplay& self, const py::array& index, const carray<double>& reward) {
            auto h = handles_of(index);
            checks::require_ndim(reward, "reward", 1);
            checks::require_dim(reward, "reward", 0, h.shape(0));
            py::gil_scoped_release release;
            return self.update_rewards(h.data(), reward.data(), static_cast<std::size_t>(h.shape(0)));
        },
        py::arg("index"), py::arg("reward"),
        "Replaces the rewards of the items named by index (RL or validated) with reward (n,) float, keeping "
        "original_reward (the LLM critic's shaping). Returns how many were applied (stale handles are skipped).");
    cls.def(
        "_rl_columns",
        [](const MixedReplay& self) {
            RlColumns c;
            {
                py::gil_scoped_release release;
                c = self.rl_columns();
            }
            const auto n = static_cast<py::ssize_t>(c.index.size());
            py::array_t<bool> done(n), truncated(n);
            for (py::ssize_t i = 0; i < n; ++i) {
                done.mutable_data()[i] = c.done[static_cast<std::size_t>(i)];
                truncated.mutable_data()[i] = c.truncated[static_cast<std::size_t>(i)];
            }
            py::dict d;
            d["index"] = py::array_t<std::int64_t>(n, c.index.data());
            d["episode"] = py::array_t<std::int64_t>(n, c.episode.data());
            d["decision"] = py::array_t<std::int64_t>(n, c.decision.data());
            d["reward"] = py::array_t<float>(n, c.reward.data());
            d["original_reward"] = py::array_t<float>(n, c.original_reward.data());
            d["action"] = py::array_t<std::int64_t>(n, c.action.data());
            d["done"] = done;
            d["truncated"] = truncated;
            return d;
        },
        "Live RL transitions, oldest first, as a dict of (n,) arrays.");

    cls.def("__len__", [](const MixedReplay& self) {
        py::gil_scoped_release release;
        return self.size();
    }, "Live RL transitions + live validated items with I_v = 1 (the N of the importance weights).");
    auto prop = [&cls](const char* name, auto getter, const char* doc) {
        cls.def_property_readonly(name, [getter](const MixedReplay& self) {
            py::gil_scoped_release release;
            return getter(self);
        }, doc);
    };
    prop("rl_size", [](const MixedReplay& s) { return s.rl_size(); }, "Live RL transitions.");
    prop("validated_size", [](const MixedReplay& s) { return s.llm_size(); },
         "Live items of the validated partition, valid or not.");
    prop("validated_valid_size", [](const MixedReplay& s) { return s.llm_valid_size(); },
         "Live items of the validated partition with I_v = 1.");
    prop("rl_capacity", [](const MixedReplay& s) { return s.config().rl_capacity; },
         "Observation slots of the RL partition.");
    prop("validated_capacity", [](const MixedReplay& s) { return s.config().llm_capacity; },
         "Items of the validated partition.");
    prop("obs_dim", [](const MixedReplay& s) { return s.config().obs_dim; }, "Observation dimension D.");
    prop("alpha", [](const MixedReplay& s) { return s.config().alpha; }, "Priority exponent.");
    prop("beta", [](const MixedReplay& s) { return s.config().beta; }, "Nominal validated fraction of a batch.");
    prop("tau", [](const MixedReplay& s) { return s.config().tau; }, "Eq. 8 temperature.");
    prop("max_priority", [](const MixedReplay& s) { return s.max_priority(); },
         "Priority a new RL transition gets now: the maximum over live RL transitions, or 1.0 if none is positive.");
    prop("rl_nbytes", [](const MixedReplay& s) { return s.rl_nbytes(); },
         "Bytes allocated by the RL partition (observations, columns and trees).");
    prop("nbytes", [](const MixedReplay& s) { return s.nbytes(); },
         "Bytes allocated by both partitions (what load() allocates for a file of these capacities).");
    cls.def_property_readonly("num_actions", [](const MixedReplay& self) -> std::optional<std::uint64_t> {
        if (self.num_actions() == 0) return std::nullopt;
        return self.num_actions();
    }, "The action limit given to the constructor (actions must be in [0, num_actions)), or None.");

    cls.def("get_rng_state", [](const MixedReplay& self) {
        Rng::State s;
        {
            py::gil_scoped_release release;
            s = self.rng_state();
        }
        return py::make_tuple(py::int_(s[0]), py::int_(s[1]), py::int_(s[2]), py::int_(s[3]));
    }, "The generator state (xoshiro256**), a tuple of 4 ints in [0, 2^64).");
    cls.def("set_rng_state", [](MixedReplay& self, const py::tuple& state) {
        if (state.size() != 4) {
            std::ostringstream os;
            os << "state must be a tuple of 4 ints, got " << state.size() << " elements";
            throw std::invalid_argument(os.str());
        }
        Rng::State s;
        const char* names[4] = {"state[0]", "state[1]", "state[2]", "state[3]"};
        for (std::size_t i = 0; i < 4; ++i) s[i] = checks::require_uint64(state[i], names[i]);
        py::gil_scoped_release release;
        self.set_rng_state(s);
    }, py::arg("state"), "Restores a state from get_rng_state(); ValueError for out-of-range or all-zero words.");

    cls.def("save", [](const MixedReplay& self, const std::string& path) {
        try {
            py::gil_scoped_release release;
            self.save(path);
        } catch (const std::system_error& e) {
            raise_os_error(e);
        }
    }, py::arg("path"),
            "Writes the buffer (configuration, pointers, generator state and the slots in use with their "
            "priorities; never the unused capacity) to path atomically (temporary file, fsync, rename) with a "
            "versioned header and a checksum. OSError if it cannot be written.");
    cls.def("_load", [](MixedReplay& self, const std::string& path) {
        try {
            py::gil_scoped_release release;
            self.load(path);
        } catch (const std::system_error& e) {
            raise_os_error(e);
        }
    }, py::arg("path"),
            "Replaces this buffer's whole state with the file's, format version 2 or 3 (use "
            "MixedReplayBuffer.load); the buffer keeps its num_actions. Verifies the size and the checksum before "
            "allocating the capacities the header declares. ValueError naming the file and the problem (for "
            "contents: the column, slot and value; for an allocation that fails: the column, the header field and "
            "the bytes) for a bad file (this buffer is then unchanged); OSError if unreadable.");
    cls.def("check_invariants", [](const MixedReplay& self) {
        py::gil_scoped_release release;
        return self.check_invariants();
    }, "'' if the buffer is consistent (the checks load applies: stored values an add accepts, trees equal their "
       "rebuilds, leaves match priorities and I_v, counters match), else a description. O(capacity * obs_dim).");
    cls.def("_tree_snapshot", [](const MixedReplay& self) {
        std::vector<double> rl, llm;
        std::vector<float> prio;
        double rl_root = 0, llm_root = 0;
        float max_root = 0;
        {
            py::gil_scoped_release release;
            self.tree_snapshot(rl, llm, rl_root, llm_root, prio, max_root);
        }
        py::dict d;
        d["rl_leaves"] = py::array_t<double>(static_cast<py::ssize_t>(rl.size()), rl.data());
        d["validated_leaves"] = py::array_t<double>(static_cast<py::ssize_t>(llm.size()), llm.data());
        d["rl_priorities"] = py::array_t<float>(static_cast<py::ssize_t>(prio.size()), prio.data());
        d["rl_root"] = rl_root;
        d["validated_root"] = llm_root;
        d["max_root"] = max_root;
        return d;
    }, "Copies of the sum-tree leaves and roots and the RL priorities (tests and diagnostics).");
}

}  // namespace ace_hybrid
