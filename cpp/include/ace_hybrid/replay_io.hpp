// Binary file helpers for MixedReplay::save / load: a streaming 64-bit checksum, an atomic writer
// (temporary file + fflush + fsync + rename + fsync of the directory) and a checked reader that can verify a
// checksum through a bounded buffer, then go back for a second pass.
//
// Errors: problems with the file's *contents* throw ReplayFileError (a std::invalid_argument, so ValueError in
// Python) whose message names the file and what is wrong; operating-system failures (cannot open, disk full,
// rename failed) throw std::system_error carrying errno (OSError in Python).
//
// Thread safety: none; each object is used by one call.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace ace_hybrid {

struct ReplayFileError : std::invalid_argument {
    ReplayFileError(const std::string& path, const std::string& what)
        : std::invalid_argument("replay file '" + path + "': " + what) {}
};

// Checksum over a stream of blocks (FNV-style multiply + xorshift per 64-bit word). Every step is a bijection of
// the running state for a fixed input word, so any single changed word (any bit flip) changes the final value.
// It detects accidental corruption; it is not a cryptographic MAC. ~3 GB/s.
//
// A block of n bytes first mixes in n (checksum_begin), then its 64-bit words in order, the last one zero-padded
// (checksum_words). Feeding a block in chunks gives the same value as checksum_block when every chunk but the last
// is a multiple of 8 bytes long, which is how CheckedFileReader::hash_through streams a block of any size through
// a small buffer.
constexpr std::uint64_t kChecksumPrime = 0x100000001B3ULL;

inline std::uint64_t checksum_begin(std::uint64_t h, std::uint64_t n) { return (h ^ n) * kChecksumPrime; }

inline std::uint64_t checksum_words(std::uint64_t h, const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, b + i, 8);
        h = (h ^ w) * kChecksumPrime;
        h ^= h >> 29;
    }
    if (i < n) {
        std::uint64_t w = 0;
        std::memcpy(&w, b + i, n - i);
        h = (h ^ w) * kChecksumPrime;
        h ^= h >> 29;
    }
    return h;
}

inline std::uint64_t checksum_block(std::uint64_t h, const void* data, std::size_t n) {
    return checksum_words(checksum_begin(h, static_cast<std::uint64_t>(n)), data, n);
}
constexpr std::uint64_t kChecksumSeed = 0xC0FFEE1234567890ULL;

class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::string path)
        : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(static_cast<long>(::getpid()))) {
        const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create '" + tmp_ + "'");
        f_ = ::fdopen(fd, "wb");
        if (!f_) {
            const int e = errno;
            ::close(fd);
            ::unlink(tmp_.c_str());
            throw std::system_error(e, std::generic_category(), "cannot open '" + tmp_ + "'");
        }
    }
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
    ~AtomicFileWriter() {
        if (f_) {  // not committed: drop the temporary file
            std::fclose(f_);
            ::unlink(tmp_.c_str());
        }
    }

    void write(const void* data, std::size_t n) {
        if (n && std::fwrite(data, 1, n, f_) != n)
            throw std::system_error(errno, std::generic_category(), "cannot write '" + tmp_ + "'");
        hash_ = checksum_block(hash_, data, n);
    }
    template <typename T>
    void put(T v) { write(&v, sizeof(T)); }
    std::uint64_t hash() const { return hash_; }

    // Flushes, fsyncs, closes and renames the temporary file onto the target, then fsyncs the directory.
    void commit() {
        if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
            throw std::system_error(errno, std::generic_category(), "cannot flush '" + tmp_ + "'");
        FILE* f = f_;
        f_ = nullptr;
        if (std::fclose(f) != 0) {
            const int e = errno;
            ::unlink(tmp_.c_str());
            throw std::system_error(e, std::generic_category(), "cannot close '" + tmp_ + "'");
        }
        if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
            const int e = errno;
            ::unlink(tmp_.c_str());
            throw std::system_error(e, std::generic_category(), "cannot rename '" + tmp_ + "' to '" + path_ + "'");
        }
        const auto slash = path_.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
        const int dfd = ::open(dir.c_str(), O_RDONLY);
        if (dfd >= 0) {  // best effort: some file systems refuse fsync on directories
            (void)::fsync(dfd);
            ::close(dfd);
        }
    }

private:
    std::string path_, tmp_;
    FILE* f_ = nullptr;
    std::uint64_t hash_ = kChecksumSeed;
};

class CheckedFileReader {
public:
    explicit CheckedFileReader(std::string path) : path_(std::move(path)) {
        f_ = std::fopen(path_.c_str(), "rb");
        if (!f_) throw std::system_error(errno, std::generic_category(), "cannot open '" + path_ + "'");
        struct stat st {};
        if (::fstat(::fileno(f_), &st) != 0) {
            const int e = errno;
            std::fclose(f_);
            throw std::system_error(e, std::generic_category(), "cannot stat '" + path_ + "'");
        }
        if (!S_ISREG(st.st_mode)) {
            std::fclose(f_);
            throw ReplayFileError(path_, "not a regular file");
        }
        size_ = static_cast<std::uint64_t>(st.st_size);
    }
    CheckedFileReader(const CheckedFileReader&) = delete;
    CheckedFileReader& operator=(const CheckedFileReader&) = delete;
    ~CheckedFileReader() { std::fclose(f_); }

    std::uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }

    void read(void* data, std::size_t n, bool hashed = true) {
        raw_read(data, n);
        if (hashed) hash_ = checksum_block(hash_, data, n);
    }
    template <typename T>
    T get() {
        T v;
        read(&v, sizeof(T));
        return v;
    }
    std::uint64_t hash() const { return hash_; }

    // Reads the next n bytes and mixes them into the checksum as ONE block (the value read(p, n) would give),
    // through a buffer of at most kChunk bytes: memory O(min(n, kChunk)) whatever n is, so a file's checksum can be
    // verified before anything proportional to the sizes its header declares is allocated. O(n).
    void hash_through(std::uint64_t n) {
        hash_ = checksum_begin(hash_, n);
        chunk_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(n, kChunk)));
        while (n > 0) {
            const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(n, kChunk));  // a multiple of 8 but last
            raw_read(chunk_.data(), k);
            hash_ = checksum_words(hash_, chunk_.data(), k);
            n -= k;
        }
        chunk_.clear();
        chunk_.shrink_to_fit();
    }

    // Bytes consumed so far, and a jump back to such an offset with the checksum as it was there (for a second
    // pass over the same bytes). O(1).
    std::uint64_t offset() const { return offset_; }
    void seek(std::uint64_t offset, std::uint64_t hash) {
        if (::fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0)
            throw std::system_error(errno, std::generic_category(), "cannot seek in '" + path_ + "'");
        offset_ = offset;
        hash_ = hash;
    }

    static constexpr std::uint64_t kChunk = std::uint64_t(1) << 20;
    static_assert(kChunk % 8 == 0, "hash_through needs chunks of whole 64-bit words");

private:
    void raw_read(void* data, std::size_t n) {
        if (n && std::fread(data, 1, n, f_) != n) {
            if (std::ferror(f_)) throw std::system_error(errno, std::generic_category(), "cannot read '" + path_ + "'");
            throw ReplayFileError(path_, "file is truncated");
        }
        offset_ += n;
    }

    std::string path_;
    FILE* f_ = nullptr;
    std::uint64_t size_ = 0;
    std::uint64_t offset_ = 0;
    std::uint64_t hash_ = kChecksumSeed;
    std::vector<unsigned char> chunk_;
};

}  // namespace ace_hybrid
