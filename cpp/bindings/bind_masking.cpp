// Bindings of ace_hybrid/action_mask.hpp: ActionFootprint (action -> substations / lines, CSR) and
// LegalityMasker (Grid2Op's legality rules as a boolean mask over a whole action catalog).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ace_hybrid/action_mask.hpp"
#include "ace_hybrid/topology.hpp"
#include "bindings.hpp"
#include "checks.hpp"

namespace py = pybind11;

namespace ace_hybrid {

namespace {

constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
    py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
    if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
    return out;
}

py::array_t<bool> to_numpy_bool(const std::vector<std::uint8_t>& v) {
    py::array_t<bool> out(static_cast<py::ssize_t>(v.size()));
    bool* p = out.mutable_data();
    for (std::size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
    return out;
}

template <typename T>
std::vector<T> vec1d(py::handle obj, const char* name, std::int64_t lo, std::int64_t hi, bool allow_bool = false) {
    auto arr = checks::require_integer_array<T>(obj, name, lo, hi, allow_bool);
    checks::require_ndim(arr, name, 1);
    return checks::to_vector<T>(arr);
}

std::int32_t count_arg(std::int64_t v, const char* name) {
    checks::require_in<std::int64_t>(v, 0, kI32Max, name);
    return static_cast<std::int32_t>(v);
}

// The three per-observation arrays, dtype-, range- and shape-checked. ndim 1: one observation; ndim 2: a batch.
struct ObsArrays {
    checks::carray<std::uint8_t> status;
    checks::carray<std::int32_t> cooldown_line;
    checks::carray<std::int32_t> cooldown_sub;
    py::ssize_t batch = 1;
};

ObsArrays check_obs(const LegalityMasker& m, py::handle line_status, py::handle cooldown_line, py::handle cooldown_sub,
                    py::ssize_t ndim) {
    ObsArrays o;
    o.status = checks::require_integer_array<std::uint8_t>(line_status, "line_status", 0, 1, /*allow_bool=*/true);
    o.cooldown_line = checks::require_integer_array<std::int32_t>(cooldown_line, "cooldown_line", 0, kI32Max);
    o.cooldown_sub = checks::require_integer_array<std::int32_t>(cooldown_sub, "cooldown_sub", 0, kI32Max);
    checks::require_ndim(o.status, "line_status", ndim);
    checks::require_ndim(o.cooldown_line, "cooldown_line", ndim);
    checks::require_ndim(o.cooldown_sub, "cooldown_sub", ndim);
    const py::ssize_t ax = ndim - 1;
    if (ndim == 2) {
        o.batch = o.status.shape(0);
        checks::require_dim(o.cooldown_line, "cooldown_line", 0, o.batch);
        checks::require_dim(o.cooldown_sub, "cooldown_sub", 0, o.batch);
    }
    checks::require_dim(o.status, "line_status", ax, m.footprint().n_line());
    checks::require_dim(o.cooldown_line, "cooldown_line", ax, m.footprint().n_line());
    checks::require_dim(o.cooldown_sub, "cooldown_sub", ax, m.footprint().n_sub());
    return o;
}

// mask() or group_mask() (`method`) of one observation into a new (n,) bool array.
template <typename Method>
py::array_t<bool> one_observation(const LegalityMasker& lm, Method method, py::ssize_t n, py::handle line_status,
                                  py::handle cooldown_line, py::handle cooldown_sub) {
    ObsArrays o = check_obs(lm, line_status, cooldown_line, cooldown_sub, 1);
    py::array_t<bool> out(n);
    (lm.*method)(o.status.data(), o.cooldown_line.data(), o.cooldown_sub.data(), out.mutable_data());
    return out;
}

}  // namespace

void bind_masking(py::module_& m) {
    py::class_<ActionFootprint>(
        m, "ActionFootprint",
        "What each action of a catalog touches, as Grid2Op's legality rules see it (CSR):\n"
        "  substation entries sub_ptr[a]:sub_ptr[a+1] -> sub_idx (substation), sub_sets_other (a load / gen /\n"
        "  storage of it gets a bus), sub_line_idx[sub_line_ptr[e]:sub_line_ptr[e+1]] (lines with an end set there);\n"
        "  status entries status_ptr[a]:status_ptr[a+1] -> status_idx (line), status_val (+1 reconnect, -1 disconnect).\n"
        "Bus-assignment actions have one substation entry, line-status actions one status entry, do-nothing none;\n"
        "build a catalog with ActionFootprint.concatenate. Immutable.")
        .def(py::init([](std::int64_t n_sub, std::int64_t n_line, py::handle sub_ptr, py::handle sub_idx,
                         py::handle sub_sets_other, py::handle sub_line_ptr, py::handle sub_line_idx,
                         py::handle status_ptr, py::handle status_idx, py::handle status_val) {
                 return ActionFootprint(
                     count_arg(n_sub, "n_sub"), count_arg(n_line, "n_line"),
                     vec1d<std::int64_t>(sub_ptr, "sub_ptr", 0, kI64Max), vec1d<std::int32_t>(sub_idx, "sub_idx", 0, kI32Max),
                     vec1d<std::uint8_t>(sub_sets_other, "sub_sets_other", 0, 1, true),
                     vec1d<std::int64_t>(sub_line_ptr, "sub_line_ptr", 0, kI64Max),
                     vec1d<std::int32_t>(sub_line_idx, "sub_line_idx", 0, kI32Max),
                     vec1d<std::int64_t>(status_ptr, "status_ptr", 0, kI64Max),
                     vec1d<std::int32_t>(status_idx, "status_idx", 0, kI32Max),
                     vec1d<std::int8_t>(status_val, "status_val", -1, 1));
             }),
             py::arg("n_sub"), py::arg("n_line"), py::arg("sub_ptr"), py::arg("sub_idx"), py::arg("sub_sets_other"),
             py::arg("sub_line_ptr"), py::arg("sub_line_idx"), py::arg("status_ptr"), py::arg("status_idx"),
             py::arg("status_val"),
             "Build from 1-D integer CSR arrays (see the class docstring). ValueError on a dtype / shape / pointer\n"
             "problem, a substation twice in one action, a status value not in {-1, +1}; IndexError on an id\n"
             "outside [0, n_sub) / [0, n_line).")
        .def_static(
            "do_nothing",
            [](std::int64_t n_sub, std::int64_t n_line, std::int64_t count) {
                checks::require_in<std::int64_t>(count, 0, kI32Max, "count");
                return ActionFootprint::do_nothing(count_arg(n_sub, "n_sub"), count_arg(n_line, "n_line"), count);
            },
            py::arg("n_sub"), py::arg("n_line"), py::arg("count") = 1, "`count` do-nothing actions (empty footprints).")
        .def_static(
            "line_status",
            [](std::int64_t n_sub, std::int64_t n_line, py::handle line_ids, py::handle values) {
                return ActionFootprint::line_status(count_arg(n_sub, "n_sub"), count_arg(n_line, "n_line"),
                                                    vec1d<std::int32_t>(line_ids, "line_ids", 0, kI32Max),
                                                    vec1d<std::int8_t>(values, "values", -1, 1));
            },
            py::arg("n_sub"), py::arg("n_line"), py::arg("line_ids"), py::arg("values"),
            "One action per k: set the status of line line_ids[k] to values[k] (+1 reconnect, -1 disconnect).")
        .def_static(
            "from_bus_assignments", [](const BusAssignmentActions& actions) { return actions.footprint(); },
            py::arg("actions"),
            "Footprint of enumerated bus-assignment actions: one substation entry per action (sets a load / gen /\n"
            "storage iff the substation has one; its lines = every line with an end there).")
        .def_static(
            "concatenate",
            [](const py::sequence& parts) {
                std::vector<const ActionFootprint*> ptrs;
                for (py::ssize_t i = 0; i < static_cast<py::ssize_t>(parts.size()); ++i) {
                    py::object item = parts[static_cast<std::size_t>(i)];
                    if (!py::isinstance<ActionFootprint>(item)) {
                        throw py::type_error("parts[" + std::to_string(i) + "] must be an ActionFootprint, got " +
                                             py::str(py::type::of(item)).cast<std::string>());
                    }
                    ptrs.push_back(item.cast<const ActionFootprint*>());
                }
                return ActionFootprint::concatenate(ptrs);
            },
            py::arg("parts"),
            "The actions of `parts` one after the other (ValueError if empty or if n_sub / n_line differ).")
        .def_property_readonly("n_actions", &ActionFootprint::n_actions, "Number of actions.")
        .def("__len__", &ActionFootprint::n_actions)
        .def_property_readonly("n_sub", &ActionFootprint::n_sub, "Number of substations.")
        .def_property_readonly("n_line", &ActionFootprint::n_line, "Number of lines.")
        .def_property_readonly("sub_ptr", [](const ActionFootprint& f) { return to_numpy(f.sub_ptr()); },
                               "(n_actions + 1,) int64 CSR pointer into the substation entries.")
        .def_property_readonly("sub_idx", [](const ActionFootprint& f) { return to_numpy(f.sub_idx()); },
                               "(n_entries,) int32 substation of each substation entry.")
        .def_property_readonly("sub_sets_other", [](const ActionFootprint& f) { return to_numpy_bool(f.sub_sets_other()); },
                               "(n_entries,) bool: the entry sets a load, generator or storage unit.")
        .def_property_readonly("sub_line_ptr", [](const ActionFootprint& f) { return to_numpy(f.sub_line_ptr()); },
                               "(n_entries + 1,) int64 CSR pointer into sub_line_idx.")
        .def_property_readonly("sub_line_idx", [](const ActionFootprint& f) { return to_numpy(f.sub_line_idx()); },
                               "int32 lines with an end set at each substation entry.")
        .def_property_readonly("status_ptr", [](const ActionFootprint& f) { return to_numpy(f.status_ptr()); },
                               "(n_actions + 1,) int64 CSR pointer into the status entries.")
        .def_property_readonly("status_idx", [](const ActionFootprint& f) { return to_numpy(f.status_idx()); },
                               "int32 line of each status entry.")
        .def_property_readonly("status_val", [](const ActionFootprint& f) { return to_numpy(f.status_val()); },
                               "int8 value of each status entry: +1 reconnect, -1 disconnect.")
        .def_property_readonly("bus_line_ptr", [](const ActionFootprint& f) { return to_numpy(f.bus_line_ptr()); },
                               "(n_actions + 1,) int64 CSR pointer into bus_line_idx.")
        .def_property_readonly("bus_line_idx", [](const ActionFootprint& f) { return to_numpy(f.bus_line_idx()); },
                               "int32 distinct lines (sorted) one of whose ends each action sets.")
        .def_property_readonly("n_groups", &ActionFootprint::n_groups,
                               "Number of distinct footprints (actions of one group are equally legal).")
        .def_property_readonly("group_of", [](const ActionFootprint& f) { return to_numpy(f.group_of()); },
                               "(n_actions,) int32 group of each action.")
        .def("__repr__", [](const ActionFootprint& f) {
            return "ActionFootprint(n_actions=" + std::to_string(f.n_actions()) + ", n_groups=" +
                   std::to_string(f.n_groups()) + ", n_sub=" + std::to_string(f.n_sub()) +
                   ", n_line=" + std::to_string(f.n_line()) + ")";
        });

    py::class_<LegalityMasker>(
        m, "LegalityMasker",
        "Grid2Op's legality verdict (DefaultRules / RulesByArea: line and substation cooldowns, MAX_SUB_CHANGED,\n"
        "MAX_LINE_STATUS_CHANGED, setting a bus on a disconnected line = reconnecting it) for every action of a\n"
        "footprint at once. Each distinct footprint is evaluated once per observation, then broadcast. Immutable;\n"
        "mask / mask_batch are thread-safe. Grid2Op also calls every action legal while env.nb_time_step <= 0:\n"
        "that is left to the caller.")
        .def(py::init([](const ActionFootprint& footprint, std::int64_t max_sub_changed,
                         std::int64_t max_line_status_changed, py::handle sub_area, py::handle line_area,
                         bool check_limits, bool check_cooldowns) {
                 if (sub_area.is_none() != line_area.is_none())
                     throw std::invalid_argument("sub_area and line_area must be given together (or both None)");
                 LegalityRules r;
                 r.max_sub_changed = count_arg(max_sub_changed, "max_sub_changed");
                 r.max_line_status_changed = count_arg(max_line_status_changed, "max_line_status_changed");
                 r.check_limits = check_limits;
                 r.check_cooldowns = check_cooldowns;
                 if (!sub_area.is_none()) {
                     r.sub_area = vec1d<std::int32_t>(sub_area, "sub_area", 0, kI32Max);
                     r.line_area = vec1d<std::int32_t>(line_area, "line_area", 0, kI32Max);
                 }
                 return LegalityMasker(footprint, std::move(r));
             }),
             py::arg("footprint"), py::arg("max_sub_changed") = 1, py::arg("max_line_status_changed") = 1,
             py::arg("sub_area") = py::none(), py::arg("line_area") = py::none(), py::arg("check_limits") = true,
             py::arg("check_cooldowns") = true,
             "Copy the footprint and the rules. max_*: Grid2Op's Parameters.MAX_SUB_CHANGED /\n"
             "MAX_LINE_STATUS_CHANGED (>= 0). sub_area (n_sub,) / line_area (n_line,): area ids for RulesByArea\n"
             "(limits then apply per area; Grid2Op puts a line in its origin's area), None = one area.\n"
             "check_limits=False drops the counting rule (PreventReconnection alone), check_cooldowns=False the\n"
             "cooldown rule (LookParam alone).")
        .def_property_readonly("n_actions", &LegalityMasker::n_actions, "Number of actions masked.")
        .def_property_readonly("n_area", &LegalityMasker::n_area, "Number of areas (1 = DefaultRules).")
        .def_property_readonly("max_sub_changed", [](const LegalityMasker& lm) { return lm.rules().max_sub_changed; },
                               "Substations an action may change (per area).")
        .def_property_readonly("max_line_status_changed",
                               [](const LegalityMasker& lm) { return lm.rules().max_line_status_changed; },
                               "Line statuses an action may change (per area).")
        .def_property_readonly("footprint", &LegalityMasker::footprint, py::return_value_policy::reference_internal,
                               "The ActionFootprint masked (a view kept alive by the masker).")
        .def(
            "mask",
            [](const LegalityMasker& lm, py::handle line_status, py::handle cooldown_line, py::handle cooldown_sub) {
                return one_observation(lm, &LegalityMasker::mask, static_cast<py::ssize_t>(lm.n_actions()),
                                       line_status, cooldown_line, cooldown_sub);
            },
            py::arg("line_status"), py::arg("cooldown_line"), py::arg("cooldown_sub"),
            "Legal mask for one observation: line_status (n_line,) bool (or 0/1 ints), cooldown_line (n_line,)\n"
            "and cooldown_sub (n_sub,) non-negative ints (obs.time_before_cooldown_line / _sub) ->\n"
            "(n_actions,) bool. ValueError on a dtype, shape or value problem.")
        .def(
            "mask_batch",
            [](const LegalityMasker& lm, py::handle line_status, py::handle cooldown_line, py::handle cooldown_sub) {
                ObsArrays o = check_obs(lm, line_status, cooldown_line, cooldown_sub, 2);
                py::array_t<bool> out({o.batch, static_cast<py::ssize_t>(lm.n_actions())});
                bool* p = out.mutable_data();
                std::vector<std::uint8_t> st(o.status.data(), o.status.data() + o.status.size());
                std::vector<std::int32_t> cl(o.cooldown_line.data(), o.cooldown_line.data() + o.cooldown_line.size());
                std::vector<std::int32_t> cs(o.cooldown_sub.data(), o.cooldown_sub.data() + o.cooldown_sub.size());
                {
                    py::gil_scoped_release release;  // inputs copied above; `out` is not visible to Python yet
                    lm.mask_batch(o.batch, st.data(), cl.data(), cs.data(), p);
                }
                return out;
            },
            py::arg("line_status"), py::arg("cooldown_line"), py::arg("cooldown_sub"),
            "Legal masks for B observations: line_status (B, n_line), cooldown_line (B, n_line), cooldown_sub\n"
            "(B, n_sub) -> (B, n_actions) bool. Releases the GIL.")
        .def(
            "group_mask",
            [](const LegalityMasker& lm, py::handle line_status, py::handle cooldown_line, py::handle cooldown_sub) {
                return one_observation(lm, &LegalityMasker::group_mask,
                                       static_cast<py::ssize_t>(lm.footprint().n_groups()), line_status,
                                       cooldown_line, cooldown_sub);
            },
            py::arg("line_status"), py::arg("cooldown_line"), py::arg("cooldown_sub"),
            "Legality of each distinct footprint (n_groups,) bool; mask == group_mask[footprint.group_of].")
        .def("__repr__", [](const LegalityMasker& lm) {
            return "LegalityMasker(n_actions=" + std::to_string(lm.n_actions()) + ", n_area=" +
                   std::to_string(lm.n_area()) + ", max_sub_changed=" + std::to_string(lm.rules().max_sub_changed) +
                   ", max_line_status_changed=" + std::to_string(lm.rules().max_line_status_changed) + ")";
        });
}

}  // namespace ace_hybrid
