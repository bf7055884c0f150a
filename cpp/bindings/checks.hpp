// Argument checks shared by every binding. Each throws ValueError / IndexError (std::invalid_argument /
// std::out_of_range) whose message names the argument, the offending value and the valid range, before any
// pointer into the array is taken. Arrays arrive as py::array_t<T, c_style | forcecast>, so dtype and layout
// are already normalised; these check ndim, shape and values.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ace_hybrid::checks {

namespace py = pybind11;

template <typename T>
using carray = py::array_t<T, py::array::c_style | py::array::forcecast>;

inline std::string shape_str(const py::array& a) {
    std::ostringstream os;
    os << "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
    os << (a.ndim() == 1 ? ",)" : ")");
    return os.str();
}

// Requires a.ndim() == ndim.
inline void require_ndim(const py::array& a, const char* name, py::ssize_t ndim) {
    if (a.ndim() != ndim) {
        std::ostringstream os;
        os << name << " must have " << ndim << " dimension(s), got " << a.ndim() << " with shape " << shape_str(a);
        throw std::invalid_argument(os.str());
    }
}

// Requires a.shape(axis) == expected.
inline void require_dim(const py::array& a, const char* name, py::ssize_t axis, py::ssize_t expected) {
    if (a.shape(axis) != expected) {
        std::ostringstream os;
        os << name << " has shape " << shape_str(a) << ": axis " << axis << " must be " << expected;
        throw std::invalid_argument(os.str());
    }
}

// Requires every element finite.
template <typename T>
void require_finite(const T* data, py::ssize_t n, const char* name) {
    for (py::ssize_t i = 0; i < n; ++i) {
        if (!std::isfinite(static_cast<double>(data[i]))) {
            std::ostringstream os;
            os << name << "[" << i << "] = " << data[i] << " is not finite";
            throw std::invalid_argument(os.str());
        }
    }
}

// Requires lo <= x < hi for an index-like scalar; IndexError otherwise.
inline void require_index(std::int64_t x, std::int64_t lo, std::int64_t hi, const char* name) {
    if (x < lo || x >= hi) {
        std::ostringstream os;
        os << name << " " << x << " out of range [" << lo << ", " << hi << ")";
        throw std::out_of_range(os.str());
    }
}

// Requires lo <= x <= hi for a parameter; ValueError otherwise.
template <typename T>
void require_in(T x, T lo, T hi, const char* name) {
    if (!(x >= lo && x <= hi)) {
        std::ostringstream os;
        os << name << " = " << x << " out of range [" << lo << ", " << hi << "]";
        throw std::invalid_argument(os.str());
    }
}

}  // namespace ace_hybrid::checks
