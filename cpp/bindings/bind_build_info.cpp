#include <pybind11/pybind11.h>

#include <string>

#include "bindings.hpp"

namespace py = pybind11;

namespace ace_hybrid {

namespace {
std::string compiler_name() {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
    return "msvc " + std::to_string(_MSC_VER);
#else
    return "unknown";
#endif
}
}  // namespace

void bind_build_info(py::module_& m) {
    m.def(
        "build_info",
        []() {
            py::dict info;
            info["version"] = ACE_HYBRID_VERSION;
            info["compiler"] = compiler_name();
            info["cxx_standard"] = static_cast<long>(__cplusplus);
            info["build_type"] = ACE_HYBRID_BUILD_TYPE;
            info["flags"] = ACE_HYBRID_CXX_FLAGS;
            info["sanitizers"] = static_cast<bool>(ACE_HYBRID_SANITIZE);
            info["pybind11"] = std::to_string(PYBIND11_VERSION_MAJOR) + "." + std::to_string(PYBIND11_VERSION_MINOR) +
                               "." + std::to_string(PYBIND11_VERSION_PATCH);
            return info;
        },
        "How the extension was compiled: version, compiler, C++ standard, build type, flags, sanitizers.");
}

}  // namespace ace_hybrid
