// What a program or shared library asks the dynamic loader for: DT_NEEDED and its search path.
#include "stage_tree/elf_needs.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <cstring>

namespace canopy::stage {
namespace {

// A file that may be anything: every read is bounded, and a short one is malformed.
class File {
public:
    explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
    ~File()
    {
        if (fd_ >= 0)
            ::close(fd_);
    }
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    bool open() const { return fd_ >= 0; }
    bool read(void* out, std::size_t size, std::uint64_t offset) const
    {
        return ::pread(fd_, out, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
    }
    // A NUL-terminated string at `offset`, at most `limit` bytes long.
    std::optional<std::string> string_at(std::uint64_t offset, std::size_t limit) const
    {
        std::string out(std::min<std::size_t>(limit, 4096), '\0');
        ssize_t got = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(offset));
        if (got <= 0)
            return std::nullopt;
        auto end = std::memchr(out.data(), '\0', static_cast<std::size_t>(got));
        if (!end)
            return std::nullopt;
        out.resize(static_cast<std::size_t>(static_cast<const char*>(end) - out.data()));
        return out;
    }

private:
    int fd_;
};

// ElfW is this machine's class: a library of another class is not one our loader would load.
constexpr std::size_t max_headers = 4096;
constexpr std::size_t max_dynamic_entries = 1 << 16;

std::optional<ElfNeeds> read_needs(const File& file)
{
    ElfW(Ehdr) header{};
    if (!file.read(&header, sizeof header, 0) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
        return std::nullopt;
    const bool native_class = header.e_ident[EI_CLASS] == (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32);
    const bool native_order = header.e_ident[EI_DATA] == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB
                                                                                                    : ELFDATA2MSB);
    if (!native_class || !native_order || header.e_phentsize != sizeof(ElfW(Phdr)) || header.e_phnum == 0 ||
        header.e_phnum > max_headers)
        return std::nullopt;
    std::vector<ElfW(Phdr)> segments(header.e_phnum);
    if (!file.read(segments.data(), segments.size() * sizeof(ElfW(Phdr)), header.e_phoff))
        return std::nullopt;

    const ElfW(Phdr)* dynamic = nullptr;
    for (const auto& segment : segments)
        if (segment.p_type == PT_DYNAMIC)
            dynamic = &segment;
    if (!dynamic)
        return ElfNeeds{};   // static: it needs nothing
    std::size_t count = dynamic->p_filesz / sizeof(ElfW(Dyn));
    if (count == 0 || count > max_dynamic_entries)
        return std::nullopt;
    std::vector<ElfW(Dyn)> entries(count);
    if (!file.read(entries.data(), count * sizeof(ElfW(Dyn)), dynamic->p_offset))
        return std::nullopt;

    std::uint64_t strings_address = 0;
    std::uint64_t strings_size = 0;
    std::vector<std::uint64_t> needed;
    std::optional<std::uint64_t> runpath, rpath;
    for (const auto& entry : entries) {
        if (entry.d_tag == DT_NULL)
            break;
        switch (entry.d_tag) {
        case DT_STRTAB: strings_address = entry.d_un.d_ptr; break;
        case DT_STRSZ: strings_size = entry.d_un.d_val; break;
        case DT_NEEDED: needed.push_back(entry.d_un.d_val); break;
        case DT_RUNPATH: runpath = entry.d_un.d_val; break;
        case DT_RPATH: rpath = entry.d_un.d_val; break;
        default: break;
        }
    }
    // The string table is given by address: find the loaded segment that holds it in the file.
    std::optional<std::uint64_t> strings_offset;
    for (const auto& segment : segments)
        if (segment.p_type == PT_LOAD && strings_address >= segment.p_vaddr &&
            strings_address - segment.p_vaddr < segment.p_filesz)
            strings_offset = strings_address - segment.p_vaddr + segment.p_offset;
    if (!strings_offset || strings_size == 0)
        return needed.empty() && !runpath && !rpath ? std::optional<ElfNeeds>(ElfNeeds{}) : std::nullopt;

    auto string = [&](std::uint64_t at) -> std::optional<std::string> {
        if (at >= strings_size)
            return std::nullopt;
        return file.string_at(*strings_offset + at, static_cast<std::size_t>(strings_size - at));
    };
    ElfNeeds needs;
    for (std::uint64_t at : needed) {
        auto name = string(at);
        if (!name)
            return std::nullopt;
        if (!name->empty())
            needs.needed.push_back(std::move(*name));
    }
    if (auto search = runpath ? runpath : rpath) {
        auto path = string(*search);
        if (!path)
            return std::nullopt;
        std::size_t start = 0;
        while (start <= path->size()) {
            std::size_t colon = path->find(':', start);
            if (colon == std::string::npos)
                colon = path->size();
            if (colon > start)
                needs.search_path.push_back(path->substr(start, colon - start));
            start = colon + 1;
        }
    }
    return needs;
}

} // namespace

std::optional<ElfNeeds> read_elf_needs(const std::string& path)
{
    File file(path);
    if (!file.open())
        return std::nullopt;
    return read_needs(file);
}

} // namespace canopy::stage
