// Declarations of the per-area binding functions; one .cpp file each.
#pragma once
#include <pybind11/pybind11.h>

namespace ace_hybrid {
void bind_build_info(pybind11::module_& m);
void bind_replay(pybind11::module_& m);
void bind_topology(pybind11::module_& m);
void bind_masking(pybind11::module_& m);
void bind_sampling(pybind11::module_& m);
}  // namespace ace_hybrid
