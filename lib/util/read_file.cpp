#include "util/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace canopy {

Result<std::string> read_file(const std::string& path, std::size_t max_bytes, const char* what)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return make_error("{} {}: cannot read: {}", what, path, std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0 || S_ISDIR(info.st_mode) || S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) {
        bool directory = S_ISDIR(info.st_mode);
        ::close(fd);
        return make_error("{} {}: {}", what, path, directory ? "is a directory, not a file" : "is a device, not a file");
    }
    std::string text;
    char buffer[64 * 1024];
    while (true) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int error = errno;
            ::close(fd);
            return make_error("{} {}: cannot read: {}", what, path, std::strerror(error));
        }
        if (n == 0)
            break;
        if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
            ::close(fd);
            return make_error("{} {}: larger than {} MiB; is it the right file?", what, path, max_bytes >> 20);
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return text;
}

std::size_t read_at(int fd, std::uint64_t offset, std::span<std::uint8_t> out)
{
    std::size_t filled = 0;
    while (filled < out.size()) {
        ssize_t got = ::pread(fd, out.data() + filled, out.size() - filled, static_cast<off_t>(offset + filled));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        filled += static_cast<std::size_t>(got);
    }
    return filled;
}

} // namespace canopy
