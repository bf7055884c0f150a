// The one extension module, ace_hybrid._core. Each area binds itself from its own file.
#include <pybind11/pybind11.h>

#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
    m.doc() = "ace_hybrid compiled core: mixed prioritised replay, action enumeration, legality masks";
    ace_hybrid::bind_build_info(m);
    ace_hybrid::bind_replay(m);
    ace_hybrid::bind_topology(m);
    ace_hybrid::bind_masking(m);
    ace_hybrid::bind_sampling(m);
}
