// Bindings of ace_hybrid/topology.hpp: GridLayout, enumerate_bus_assignments, BusAssignmentActions.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ace_hybrid/topology.hpp"
#include "bindings.hpp"
#include "checks.hpp"

namespace py = pybind11;

namespace ace_hybrid {

namespace {

constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

std::vector<std::int32_t> id_vector(py::handle obj, const char* name) {
    if (obj.is_none()) return {};
    auto arr = checks::require_integer_array<std::int32_t>(obj, name, 0, kI32Max);
    checks::require_ndim(arr, name, 1);
    return checks::to_vector<std::int32_t>(arr);
}

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
    py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
    if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
    return out;
}

std::int64_t check_action_index(const BusAssignmentActions& self, std::int64_t i) {
    const std::int64_t n = self.n_actions();
    if (i < 0) i += n;  // Python-style negative index
    checks::require_index(i, 0, n, "action index");
    return i;
}

}  // namespace

void bind_topology(py::module_& m) {
    py::class_<GridLayout>(m, "GridLayout",
                           "Which element (load, generator, line origin / extremity, storage unit) sits at which\n"
                           "position of which substation: Grid2Op's sub_info, *_to_subid and *_to_sub_pos. The\n"
                           "topology vector holds the substations one after the other (sub_start).")
        .def(py::init([](py::handle sub_info, py::handle load_to_subid, py::handle load_to_sub_pos,
                         py::handle gen_to_subid, py::handle gen_to_sub_pos, py::handle line_or_to_subid,
                         py::handle line_or_to_sub_pos, py::handle line_ex_to_subid, py::handle line_ex_to_sub_pos,
                         py::handle storage_to_subid, py::handle storage_to_sub_pos) {
                 if (sub_info.is_none()) throw std::invalid_argument("sub_info must be an integer array, got None");
                 auto si = id_vector(sub_info, "sub_info");
                 return GridLayout(std::move(si), id_vector(load_to_subid, "load_to_subid"),
                                   id_vector(load_to_sub_pos, "load_to_sub_pos"), id_vector(gen_to_subid, "gen_to_subid"),
                                   id_vector(gen_to_sub_pos, "gen_to_sub_pos"),
                                   id_vector(line_or_to_subid, "line_or_to_subid"),
                                   id_vector(line_or_to_sub_pos, "line_or_to_sub_pos"),
                                   id_vector(line_ex_to_subid, "line_ex_to_subid"),
                                   id_vector(line_ex_to_sub_pos, "line_ex_to_sub_pos"),
                                   id_vector(storage_to_subid, "storage_to_subid"),
                                   id_vector(storage_to_sub_pos, "storage_to_sub_pos"));
             }),
             py::arg("sub_info"), py::arg("load_to_subid"), py::arg("load_to_sub_pos"), py::arg("gen_to_subid"),
             py::arg("gen_to_sub_pos"), py::arg("line_or_to_subid"), py::arg("line_or_to_sub_pos"),
             py::arg("line_ex_to_subid"), py::arg("line_ex_to_sub_pos"), py::arg("storage_to_subid") = py::none(),
             py::arg("storage_to_sub_pos") = py::none(),
             "Build from 1-D integer arrays (None = no element of that kind). Raises ValueError on a dtype,\n"
             "shape or consistency problem (two elements at one position, a position holding none) and\n"
             "IndexError on a substation id or position out of range.")
        .def_property_readonly("n_sub", &GridLayout::n_sub, "Number of substations.")
        .def_property_readonly("n_line", &GridLayout::n_line, "Number of lines.")
        .def_property_readonly("dim_topo", &GridLayout::dim_topo, "Length of the topology vector (sum of sub_info).")
        .def_property_readonly("sub_info", [](const GridLayout& g) { return to_numpy(g.sub_info()); },
                               "(n_sub,) int32 number of elements per substation.")
        .def_property_readonly("sub_start", [](const GridLayout& g) { return to_numpy(g.sub_start()); },
                               "(n_sub + 1,) int32 first topology position of each substation, then dim_topo.")
        .def_property_readonly("topo_kind", [](const GridLayout& g) { return to_numpy(g.topo_kind()); },
                               "(dim_topo,) int8 element kind per topology position: 0 load, 1 gen, 2 line origin,\n"
                               "3 line extremity, 4 storage.")
        .def_property_readonly("topo_id", [](const GridLayout& g) { return to_numpy(g.topo_id()); },
                               "(dim_topo,) int32 id of the element (within its kind) per topology position.")
        .def_property_readonly("line_or_pos_topo_vect", [](const GridLayout& g) { return to_numpy(g.line_or_pos_topo_vect()); },
                               "(n_line,) int32 topology position of each line origin.")
        .def_property_readonly("line_ex_pos_topo_vect", [](const GridLayout& g) { return to_numpy(g.line_ex_pos_topo_vect()); },
                               "(n_line,) int32 topology position of each line extremity.")
        .def("__repr__", [](const GridLayout& g) {
            return "GridLayout(n_sub=" + std::to_string(g.n_sub()) + ", n_line=" + std::to_string(g.n_line()) +
                   ", dim_topo=" + std::to_string(g.dim_topo()) + ")";
        });

    py::class_<BusAssignmentActions>(m, "BusAssignmentActions",
                                     "Every single-substation bus-assignment (set_bus) action of a grid, in Grid2Op's\n"
                                     "order (get_all_unitary_topologies_set): per action its substation and its bus\n"
                                     "pattern (one int8 bus in 1..n_busbar_per_sub per element of the substation).")
        .def_property_readonly("n_actions", &BusAssignmentActions::n_actions, "Number of actions.")
        .def("__len__", &BusAssignmentActions::n_actions)
        .def_property_readonly("n_sub", [](const BusAssignmentActions& a) { return a.layout().n_sub(); },
                               "Number of substations of the grid.")
        .def_property_readonly("dim_topo", [](const BusAssignmentActions& a) { return a.layout().dim_topo(); },
                               "Length of a set_bus vector.")
        .def_property_readonly("n_busbar_per_sub", [](const BusAssignmentActions& a) { return a.options().n_busbar_per_sub; },
                               "Busbars per substation used for the enumeration.")
        .def_property_readonly("add_alone_line", [](const BusAssignmentActions& a) { return a.options().add_alone_line; },
                               "Whether a bus may hold a single element (Grid2Op's add_alone_line).")
        .def_property_readonly("layout", [](const BusAssignmentActions& a) { return a.layout(); },
                               "A copy of the GridLayout enumerated.")
        .def_property_readonly("substation", [](const BusAssignmentActions& a) { return to_numpy(a.substation()); },
                               "(n_actions,) int32 substation of each action.")
        .def_property_readonly("sub_offsets", [](const BusAssignmentActions& a) { return to_numpy(a.sub_offsets()); },
                               "(n_sub + 1,) int64: the actions of substation s are sub_offsets[s]:sub_offsets[s+1].")
        .def_property_readonly("patterns", [](const BusAssignmentActions& a) { return to_numpy(a.patterns()); },
                               "Flat int8 bus patterns; action i's is patterns[pattern_offsets[i]:pattern_offsets[i+1]].")
        .def_property_readonly("pattern_offsets", [](const BusAssignmentActions& a) { return to_numpy(a.pattern_offsets()); },
                               "(n_actions + 1,) int64 offsets into patterns.")
        .def(
            "pattern",
            [](const BusAssignmentActions& a, std::int64_t i) {
                i = check_action_index(a, i);
                const auto b = a.pattern_offsets()[static_cast<std::size_t>(i)];
                const auto e = a.pattern_offsets()[static_cast<std::size_t>(i) + 1];
                py::array_t<std::int8_t> out(static_cast<py::ssize_t>(e - b));
                std::memcpy(out.mutable_data(), a.patterns().data() + b, static_cast<std::size_t>(e - b));
                return out;
            },
            py::arg("i"),
            "Bus pattern of action i: (sub_info[substation[i]],) int8 in 1..n_busbar_per_sub. IndexError if i is\n"
            "outside [-n_actions, n_actions).")
        .def(
            "set_bus",
            [](const BusAssignmentActions& a, std::int64_t i) {
                i = check_action_index(a, i);
                py::array_t<std::int8_t> out(a.layout().dim_topo());
                a.set_bus(i, out.mutable_data());
                return out;
            },
            py::arg("i"),
            "Grid2Op set_bus vector of action i: (dim_topo,) int8, 0 = untouched, else the bus. IndexError if i is\n"
            "outside [-n_actions, n_actions).")
        .def(
            "set_bus_matrix",
            [](const BusAssignmentActions& a, py::handle indices) {
                const std::int64_t n = a.n_actions();
                auto idx = checks::require_integer_array<std::int64_t>(indices, "indices", std::numeric_limits<std::int64_t>::min(),
                                                                       std::numeric_limits<std::int64_t>::max());
                checks::require_ndim(idx, "indices", 1);
                std::vector<std::int64_t> rows(static_cast<std::size_t>(idx.size()));
                for (py::ssize_t k = 0; k < idx.size(); ++k) {
                    std::int64_t i = idx.data()[k];
                    if (i < -n || i >= n) {
                        throw std::out_of_range("indices[" + std::to_string(k) + "] = " + std::to_string(i) +
                                                " out of range [" + std::to_string(-n) + ", " + std::to_string(n) + ")");
                    }
                    rows[static_cast<std::size_t>(k)] = i < 0 ? i + n : i;
                }
                const py::ssize_t d = a.layout().dim_topo();
                py::array_t<std::int8_t> out({static_cast<py::ssize_t>(rows.size()), d});
                std::int8_t* p = out.mutable_data();
                {
                    py::gil_scoped_release release;
                    for (std::size_t k = 0; k < rows.size(); ++k) a.set_bus(rows[k], p + static_cast<py::ssize_t>(k) * d);
                }
                return out;
            },
            py::arg("indices"),
            "set_bus vectors of the actions `indices` (1-D integers, negative counted from the end):\n"
            "(len(indices), dim_topo) int8. IndexError names the first index out of range.")
        .def(
            "sub_patterns",
            [](const BusAssignmentActions& a, std::int64_t s) {
                checks::require_index(s, 0, a.layout().n_sub(), "substation");
                const auto b = a.sub_offsets()[static_cast<std::size_t>(s)];
                const auto e = a.sub_offsets()[static_cast<std::size_t>(s) + 1];
                const py::ssize_t w = a.layout().sub_info()[static_cast<std::size_t>(s)];
                py::array_t<std::int8_t> out({static_cast<py::ssize_t>(e - b), w});
                if (e > b)
                    std::memcpy(out.mutable_data(), a.patterns().data() + a.pattern_offsets()[static_cast<std::size_t>(b)],
                                static_cast<std::size_t>((e - b) * w));
                return out;
            },
            py::arg("substation"),
            "All bus patterns of one substation: (n_actions of it, sub_info[substation]) int8. IndexError if the\n"
            "substation is outside [0, n_sub).")
        .def("__repr__", [](const BusAssignmentActions& a) {
            return "BusAssignmentActions(n_actions=" + std::to_string(a.n_actions()) +
                   ", n_sub=" + std::to_string(a.layout().n_sub()) +
                   ", n_busbar_per_sub=" + std::to_string(a.options().n_busbar_per_sub) + ")";
        });

    m.def(
        "enumerate_bus_assignments",
        [](const GridLayout& layout, std::int64_t n_busbar_per_sub, bool add_alone_line, std::int64_t max_actions) {
            checks::require_in<std::int64_t>(n_busbar_per_sub, 1, 127, "n_busbar_per_sub");
            checks::require_in<std::int64_t>(max_actions, 0, std::int64_t{1} << 40, "max_actions");
            EnumerationOptions opt;
            opt.n_busbar_per_sub = static_cast<std::int32_t>(n_busbar_per_sub);
            opt.add_alone_line = add_alone_line;
            opt.max_actions = max_actions;
            GridLayout copy = layout;
            py::gil_scoped_release release;  // exceptions propagate after the GIL is re-acquired
            return BusAssignmentActions(std::move(copy), opt);
        },
        py::arg("layout"), py::arg("n_busbar_per_sub") = 2, py::arg("add_alone_line") = true,
        py::arg("max_actions") = 20000000,
        "Enumerate every single-substation bus-assignment action of `layout` exactly as Grid2Op's\n"
        "get_all_unitary_topologies_set(action_space, add_alone_line=...) does (same set, same order):\n"
        "restricted-growth bus labels (first element on bus 1), at least one line end per used bus, optionally\n"
        "two elements per bus, substations with fewer than two topologies dropped. ValueError if\n"
        "n_busbar_per_sub is outside [1, 127] or more than max_actions actions would be built. Releases the GIL.");
}

}  // namespace ace_hybrid
