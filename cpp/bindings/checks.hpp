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

// Converts obj (array or sequence) to a C-contiguous array of T after requiring an integer dtype (or a boolean one
// if allow_bool; an empty array may have any numeric dtype) and every value in [lo, hi]: floats, objects and
// strings are rejected instead of silently truncated, and values are range-checked before any narrowing cast.
// Copies only when obj is not already a C-contiguous T array. ValueError names the argument and the dtype or the
// value. A boolean column is require_integer_array<bool>(obj, name, 0, 1, true): bools, or integers 0 and 1.
template <typename T>
carray<T> require_integer_array(py::handle obj, const char* name, std::int64_t lo, std::int64_t hi,
                                bool allow_bool = false) {
    py::array arr = py::array::ensure(obj);
    if (!arr) {
        PyErr_Clear();
        std::ostringstream os;
        os << name << " must be an integer array, got an object of type " << py::str(py::type::of(obj)).cast<std::string>();
        throw std::invalid_argument(os.str());
    }
    const char kind = arr.dtype().kind();
    const bool ok = kind == 'i' || kind == 'u' || (allow_bool && kind == 'b') ||
                    (arr.size() == 0 && (kind == 'f' || kind == 'b'));
    if (!ok) {
        std::ostringstream os;
        os << name << " must have an integer" << (allow_bool ? " or boolean" : "") << " dtype, got "
           << py::str(arr.dtype()).cast<std::string>();
        throw std::invalid_argument(os.str());
    }
    auto check_range = [&](const auto* data, py::ssize_t n) {
        for (py::ssize_t i = 0; i < n; ++i) {
            const auto v = static_cast<std::int64_t>(data[i]);
            if (v < lo || v > hi) {
                std::ostringstream os;
                os << name << " holds " << v << " at flat index " << i << ", out of range [" << lo << ", " << hi
                   << "]";
                throw std::invalid_argument(os.str());
            }
        }
    };
    if (carray<T>::check_(arr)) {
        carray<T> same = py::reinterpret_borrow<carray<T>>(arr);
        check_range(same.data(), same.size());
        return same;
    }
    if (kind == 'u' && arr.itemsize() == 8) {  // uint64: huge values must not wrap to negative int64
        auto u = py::cast<carray<std::uint64_t>>(arr);
        for (py::ssize_t i = 0; i < u.size(); ++i) {
            if (u.data()[i] > static_cast<std::uint64_t>(hi)) {
                std::ostringstream os;
                os << name << " holds " << u.data()[i] << " at flat index " << i << ", out of range [" << lo << ", "
                   << hi << "]";
                throw std::invalid_argument(os.str());
            }
        }
    }
    auto wide = py::cast<carray<std::int64_t>>(arr);
    check_range(wide.data(), wide.size());
    return py::cast<carray<T>>(wide);
}

// Copies a checked 1-D array into a std::vector.
template <typename T, typename A>
std::vector<T> to_vector(const A& arr) {
    return std::vector<T>(arr.data(), arr.data() + arr.size());
}

// dtype name as numpy prints it ("float32", "bool", ">f4" shows as "float32" with byte order elided).
inline std::string dtype_str(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// Requires a floating dtype of exactly `itemsize` bytes (any byte order); ValueError naming the dtype otherwise.
inline void require_float_dtype(const py::array& a, const char* name, py::ssize_t itemsize) {
    if (a.dtype().kind() != 'f' || a.dtype().itemsize() != itemsize) {
        std::ostringstream os;
        os << name << " must have dtype float" << 8 * itemsize << ", got " << dtype_str(a);
        throw std::invalid_argument(os.str());
    }
}

// Requires dtype bool or uint8 (a byte mask: nonzero = true); ValueError naming the dtype otherwise.
inline void require_byte_mask_dtype(const py::array& a, const char* name) {
    const char kind = a.dtype().kind();
    if (!((kind == 'b' || kind == 'u') && a.dtype().itemsize() == 1)) {
        std::ostringstream os;
        os << name << " must have dtype bool or uint8, got " << dtype_str(a);
        throw std::invalid_argument(os.str());
    }
}

// Requires a Python integer (or anything with __index__) in [0, 2^64); returns it. TypeError for a non-integer,
// ValueError naming the value and the range otherwise.
inline std::uint64_t require_uint64(py::handle h, const char* name) {
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
    if (!idx) {
        PyErr_Clear();
        throw py::type_error(std::string(name) + " must be an integer, got " +
                             py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>());
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(idx.ptr());
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();
        std::ostringstream os;
        os << name << " = " << py::str(idx).cast<std::string>() << " out of range [0, 18446744073709551615]";
        throw std::invalid_argument(os.str());
    }
    return static_cast<std::uint64_t>(v);
}

// Requires `s` to be one of `options`; ValueError listing them otherwise. Returns the position in `options`.
inline std::size_t require_choice(const std::string& s, const std::vector<std::string>& options, const char* name) {
    for (std::size_t i = 0; i < options.size(); ++i)
        if (s == options[i]) return i;
    std::ostringstream os;
    os << name << " = \"" << s << "\" is not one of {";
    for (std::size_t i = 0; i < options.size(); ++i) os << (i ? ", " : "") << '"' << options[i] << '"';
    os << "}";
    throw std::invalid_argument(os.str());
}

}  // namespace ace_hybrid::checks
