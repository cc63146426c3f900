#include "report_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace canopy {

namespace fs = std::filesystem;

namespace {

std::string directory_of(const std::string& path)
{
    auto dir = fs::path(path).parent_path();
    return dir.empty() ? "." : dir.string();
}

} // namespace

bool is_html_file(std::string_view path)
{
    std::string extension = fs::path(path).extension().string();
    for (char& c : extension)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return extension == ".html" || extension == ".htm";
}

Status check_report_file(const std::string& path)
{
    std::error_code error;
    if (fs::is_directory(path, error))
        return make_error("cannot write {}: it is a directory", path);
    std::string dir = directory_of(path);
    auto status = fs::status(dir, error);
    if (!fs::exists(status))
        return make_error("cannot write {}: the directory {} does not exist", path, dir);
    if (!fs::is_directory(status))
        return make_error("cannot write {}: {} is not a directory", path, dir);
    std::string probe = dir + "/.canopy-probe.XXXXXX";
    int fd = ::mkstemp(probe.data());
    if (fd < 0)
        return make_error("cannot write {}: cannot create a file in {}: {}", path, dir, std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
    return {};
}

Status write_report_file(const std::string& path, std::string_view content)
{
    std::string tmp = path + ".XXXXXX";
    int fd = ::mkstemp(tmp.data());
    if (fd < 0)
        return make_error("cannot write {}: cannot create a file in {}: {}", path, directory_of(path),
                          std::strerror(errno));
    mode_t mask = ::umask(0);   // mkstemp makes 0600; a report gets the mode any new file would
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    std::size_t done = 0;
    int failure = 0;
    while (done < content.size() && failure == 0) {
        ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n > 0)
            done += static_cast<std::size_t>(n);
        else if (n < 0 && errno != EINTR)
            failure = errno;
    }
    if (::close(fd) != 0 && failure == 0)
        failure = errno;
    if (failure == 0 && ::rename(tmp.c_str(), path.c_str()) != 0)
        failure = errno;
    if (failure != 0) {
        ::unlink(tmp.c_str());
        return make_error("cannot write {}: {}", path, std::strerror(failure));
    }
    return {};
}

} // namespace canopy
