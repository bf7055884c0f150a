// Bindings for masked sampling / argmax / top-k over huge action sets (cpp/include/ace_hybrid/masked_sampling.hpp).
// Every argument is checked (dtype, ndim, shape, ranges) before a pointer is taken; batched work runs with the
// GIL released and errors are raised after it is re-acquired.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ace_hybrid/masked_sampling.hpp"
#include "bindings.hpp"
#include "checks.hpp"

namespace py = pybind11;

namespace ace_hybrid {

namespace {

using sampling::MaskedRows;
using sampling::OnEmpty;

// Checked, C-contiguous views of (logits, mask) that keep the arrays alive.
struct RowsInput {
    checks::carray<float> logits;
    py::object mask;  // None when there is no mask (a default py::array would be a real, empty array)
    MaskedRows rows;
};

RowsInput prepare(const py::object& logits_obj, const py::object& mask_in, const std::string& on_empty,
                  std::int64_t fallback_index) {
    if (!py::isinstance<py::array>(logits_obj))
        throw py::type_error("logits must be a numpy array of dtype float32, got " +
                             py::str(py::type::handle_of(logits_obj).attr("__name__")).cast<std::string>());
    const auto logits_in = py::reinterpret_borrow<py::array>(logits_obj);
    RowsInput in;
    in.rows.mask = nullptr;
    checks::require_float_dtype(logits_in, "logits", 4);
    checks::require_ndim(logits_in, "logits", 2);
    const py::ssize_t batch = logits_in.shape(0), n = logits_in.shape(1);
    if (n < 1 || n > std::numeric_limits<std::int32_t>::max()) {
        std::ostringstream os;
        os << "logits has shape " << checks::shape_str(logits_in) << ": the number of actions (axis 1) must be in [1, "
           << std::numeric_limits<std::int32_t>::max() << "]";
        throw std::invalid_argument(os.str());
    }
    // Native byte order and C-contiguous: a copy only when the input is strided or byte-swapped.
    in.logits = checks::carray<float>::ensure(logits_in);
    if (!in.logits) throw py::error_already_set();
    bool shared = true;
    if (!mask_in.is_none()) {
        if (!py::isinstance<py::array>(mask_in))
            throw py::type_error("mask must be a numpy array of dtype bool or uint8, or None, got " +
                                 py::str(py::type::handle_of(mask_in).attr("__name__")).cast<std::string>());
        const auto mask_arr = py::reinterpret_borrow<py::array>(mask_in);
        checks::require_byte_mask_dtype(mask_arr, "mask");
        if (mask_arr.ndim() == 1) {
            checks::require_dim(mask_arr, "mask", 0, n);
        } else if (mask_arr.ndim() == 2) {
            checks::require_dim(mask_arr, "mask", 0, batch);
            checks::require_dim(mask_arr, "mask", 1, n);
            shared = false;
        } else {
            std::ostringstream os;
            os << "mask must have shape (" << n << ",) or (" << batch << ", " << n << "), got "
               << checks::shape_str(mask_arr);
            throw std::invalid_argument(os.str());
        }
        py::array mask_c = py::array::ensure(mask_arr, py::array::c_style);
        if (!mask_c) throw py::error_already_set();
        in.rows.mask = static_cast<const std::uint8_t*>(mask_c.data());
        in.mask = std::move(mask_c);
    }
    const auto policy = static_cast<OnEmpty>(checks::require_choice(on_empty, {"error", "index"}, "on_empty"));
    if (policy == OnEmpty::Index) checks::require_index(fallback_index, 0, n, "fallback_index");
    in.rows.logits = in.logits.data();
    in.rows.mask_shared = shared;
    in.rows.batch = batch;
    in.rows.n = n;
    in.rows.on_empty = policy;
    in.rows.fallback_index = fallback_index;
    return in;
}

int resolve_threads(int num_threads, const MaskedRows& rows) {
    checks::require_in(num_threads, 0, 256, "num_threads");
    return num_threads == 0 ? sampling::auto_threads(rows.batch, rows.n) : num_threads;
}

// Runs fn() with the GIL released; rethrows its exception after the GIL is back.
template <typename Fn>
void without_gil(Fn&& fn) {
    std::exception_ptr err;
    {
        py::gil_scoped_release nogil;
        try {
            fn();
        } catch (...) {
            err = std::current_exception();
        }
    }
    if (err) std::rethrow_exception(err);
}

py::tuple state_tuple(const Rng& g) {
    const auto s = g.state();
    return py::make_tuple(s[0], s[1], s[2], s[3]);
}

void set_state_from(Rng& g, const py::handle& state) {
    if (!py::isinstance<py::sequence>(state) || py::isinstance<py::str>(state))
        throw py::type_error("state must be a sequence of 4 integers in [0, 2^64)");
    const auto seq = py::reinterpret_borrow<py::sequence>(state);
    if (seq.size() != 4) {
        std::ostringstream os;
        os << "state must have 4 integers, got " << seq.size();
        throw std::invalid_argument(os.str());
    }
    Rng::State s{};
    for (std::size_t i = 0; i < 4; ++i) s[i] = checks::require_uint64(seq[i], "state element");
    g.set_state(s);
}

}  // namespace

void bind_sampling(py::module_& m) {
    py::class_<Rng>(m, "SamplingGenerator",
                             "Seedable random generator for the masked samplers: xoshiro256** seeded through "
                             "splitmix64 (256-bit state, period 2^256 - 1).\n\n"
                             "Not thread-safe: use one generator per thread. Its state can be read and restored "
                             "(get_state / set_state) and it pickles, so runs can be checkpointed and replayed.")
        .def(py::init([](const py::object& seed) { return Rng(checks::require_uint64(seed, "seed")); }),
             py::arg("seed"), "Creates a generator from an integer seed in [0, 2^64).")
        .def(
            "get_state", [](const Rng& g) { return state_tuple(g); },
            "The 256-bit state as a tuple of four integers in [0, 2^64).")
        .def(
            "set_state", [](Rng& g, const py::object& state) { set_state_from(g, state); },
            py::arg("state"),
            "Restores a state from get_state(): four integers in [0, 2^64), not all zero.")
        .def(
            "uniform",
            [](Rng& g, std::int64_t size) {
                checks::require_in<std::int64_t>(size, 0, std::int64_t{1} << 40, "size");
                py::array_t<double> out(static_cast<py::ssize_t>(size));
                double* p = out.mutable_data();
                for (std::int64_t i = 0; i < size; ++i) p[i] = g.uniform();
                return out;
            },
            py::arg("size"),
            "Draws `size` float64 values uniform in [0, 1) (53 random bits each), advancing the state. "
            "The samplers draw exactly one such value per row.")
        .def("__repr__",
             [](const Rng& g) {
                 return "SamplingGenerator(state=" + py::repr(state_tuple(g)).cast<std::string>() + ")";
             })
        .def(py::pickle([](const Rng& g) { return state_tuple(g); },
                        [](const py::tuple& state) {
                            Rng g;
                            set_state_from(g, state);
                            return g;
                        }));

    m.def(
        "sample_masked_logits",
        [](const py::object& logits, const py::object& mask, Rng& generator, double temperature,
           const std::string& on_empty, std::int64_t fallback_index, int num_threads) {
            auto in = prepare(logits, mask, on_empty, fallback_index);
            checks::require_in(temperature, 1e-30, 1e30, "temperature");
            const int nt = resolve_threads(num_threads, in.rows);
            const auto batch = static_cast<py::ssize_t>(in.rows.batch);
            py::array_t<std::int64_t> actions(batch);
            py::array_t<double> log_probs(batch);
            py::array_t<bool> empty(batch);
            // One uniform per row, drawn here under the GIL (the generator is not thread-safe); a failed call
            // leaves the generator as it was.
            const auto saved = generator.state();
            std::vector<double> u(static_cast<std::size_t>(batch));
            for (auto& v : u) v = generator.uniform();
            std::int64_t* a = actions.mutable_data();
            double* lp = log_probs.mutable_data();
            auto* e = reinterpret_cast<std::uint8_t*>(empty.mutable_data());
            try {
                without_gil([&] {
                    sampling::masked_sample(in.rows, u.data(), static_cast<float>(temperature), a, lp, e, nt);
                });
            } catch (...) {
                generator.set_state(saved);
                throw;
            }
            return py::make_tuple(actions, log_probs, empty);
        },
        py::arg("logits"), py::arg("mask"), py::arg("generator"), py::arg("temperature") = 1.0,
        py::arg("on_empty") = "error", py::arg("fallback_index") = 0, py::arg("num_threads") = 0,
        "Draws one action per row with probability softmax(logits / temperature) over the legal actions.\n\n"
        "logits: float32 (batch, n), 1 <= n < 2^31. mask: bool or uint8, (n,) shared by all rows or (batch, n); "
        "nonzero = legal; None = all legal. A legal -inf logit has probability 0; NaN or +inf at a legal position "
        "is a ValueError naming row and column. temperature in [1e-30, 1e30]. on_empty: \"error\" (ValueError "
        "naming the first row with no legal finite logit) or \"index\" (such rows return fallback_index, in "
        "[0, n), with log-probability 0). num_threads: 0 = automatic, else 1..256; results do not depend on it.\n"
        "Consumes one generator draw per row, in row order; a call that raises leaves the generator unchanged.\n"
        "Returns (actions int64 (batch,), log_probs float64 (batch,), empty bool (batch,)).");

    m.def(
        "argmax_masked_logits",
        [](const py::object& logits, const py::object& mask, const std::string& on_empty, std::int64_t fallback_index,
           int num_threads) {
            auto in = prepare(logits, mask, on_empty, fallback_index);
            const int nt = resolve_threads(num_threads, in.rows);
            py::array_t<std::int64_t> actions(static_cast<py::ssize_t>(in.rows.batch));
            std::int64_t* a = actions.mutable_data();
            without_gil([&] { sampling::masked_argmax(in.rows, a, nt); });
            return actions;
        },
        py::arg("logits"), py::arg("mask"), py::arg("on_empty") = "error", py::arg("fallback_index") = 0,
        py::arg("num_threads") = 0,
        "Index of the largest legal logit per row; ties go to the lowest index (-0.0 ties with +0.0).\n\n"
        "Arguments and errors as sample_masked_logits (no generator, no temperature). Returns int64 (batch,).");

    m.def(
        "topk_masked_logits",
        [](const py::object& logits, const py::object& mask, std::int64_t k, const std::string& on_empty,
           std::int64_t fallback_index, int num_threads) {
            auto in = prepare(logits, mask, on_empty, fallback_index);
            checks::require_in<std::int64_t>(k, 1, in.rows.n, "k");
            const int nt = resolve_threads(num_threads, in.rows);
            const auto batch = static_cast<py::ssize_t>(in.rows.batch);
            py::array_t<std::int64_t> indices({batch, static_cast<py::ssize_t>(k)});
            py::array_t<float> values({batch, static_cast<py::ssize_t>(k)});
            std::int64_t* idx = indices.mutable_data();
            float* val = values.mutable_data();
            without_gil([&] { sampling::masked_topk(in.rows, k, idx, val, nt); });
            return py::make_tuple(indices, values);
        },
        py::arg("logits"), py::arg("mask"), py::arg("k"), py::arg("on_empty") = "error", py::arg("fallback_index") = 0,
        py::arg("num_threads") = 0,
        "The k legal actions with the largest finite logits per row, best first; ties go to the lowest index.\n\n"
        "k in [1, n]. A row with fewer than k legal finite logits is a ValueError naming it (on_empty=\"error\"), "
        "or its missing slots hold fallback_index with value -inf (on_empty=\"index\"). Other arguments and "
        "errors as argmax_masked_logits. Returns (indices int64 (batch, k), values float32 (batch, k)).");
}

}  // namespace ace_hybrid
