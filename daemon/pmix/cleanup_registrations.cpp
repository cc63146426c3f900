#include "pmix/cleanup_registrations.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include <pmix.h>

#include "pmix/pmix_commands.hpp"
#include "util/text.hpp"

namespace canopy {
namespace {

std::vector<std::string> comma_list(const pmix_value_t& value)
{
    if (value.type != PMIX_STRING || !value.data.string)
        return {};
    return split_commas(value.data.string);
}

bool flag(const pmix_info_t& info) { return info.value.type != PMIX_BOOL || info.value.data.flag; }

struct Unpacker {
    explicit Unpacker(std::string_view message)
    {
        PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
        pmix_byte_object_t bytes;
        bytes.size = message.size();
        bytes.bytes = static_cast<char*>(std::malloc(message.size()));   // the buffer takes it over
        if (bytes.bytes) {
            std::memcpy(bytes.bytes, message.data(), message.size());
            loaded = PMIx_Data_load(&buffer, &bytes) == PMIX_SUCCESS;
        }
    }
    ~Unpacker() { PMIX_DATA_BUFFER_DESTRUCT(&buffer); }
    Unpacker(const Unpacker&) = delete;
    Unpacker& operator=(const Unpacker&) = delete;

    bool unpack(void* into, std::int32_t count, pmix_data_type_t type)
    {
        std::int32_t got = count;
        return loaded && PMIx_Data_unpack(nullptr, &buffer, into, &got, type) == PMIX_SUCCESS && got == count;
    }

    pmix_data_buffer_t buffer;
    bool loaded = false;
};

} // namespace

std::vector<CleanupRegistration> registered_cleanups(std::string_view message)
{
    std::vector<CleanupRegistration> found;
    Unpacker in(message);
    std::uint8_t command = 0;
    std::size_t targets = 0, count = 0;
    // Every packed proc and info takes more than a byte, so counts beyond the message's size are not real.
    if (!in.unpack(&command, 1, PMIX_COMMAND) || command != pmix_command::job_control ||
        !in.unpack(&targets, 1, PMIX_SIZE) || targets > message.size())
        return found;
    if (targets > 0) {
        std::unique_ptr<pmix_proc_t[]> procs(new pmix_proc_t[targets]);
        if (!in.unpack(procs.get(), static_cast<std::int32_t>(targets), PMIX_PROC))
            return found;
    }
    if (!in.unpack(&count, 1, PMIX_SIZE) || count == 0 || count > message.size())
        return found;
    pmix_info_t* infos = nullptr;
    PMIX_INFO_CREATE(infos, count);
    if (in.unpack(infos, static_cast<std::int32_t>(count), PMIX_INFO)) {
        bool recursive = false, partial = false;
        for (std::size_t i = 0; i < count; ++i) {
            if (PMIX_CHECK_KEY(&infos[i], PMIX_CLEANUP_RECURSIVE))
                recursive = flag(infos[i]);
            else if (PMIX_CHECK_KEY(&infos[i], PMIX_CLEANUP_EMPTY) ||
                     PMIX_CHECK_KEY(&infos[i], PMIX_CLEANUP_LEAVE_TOPDIR))
                partial = partial || flag(infos[i]);
            else if (PMIX_CHECK_KEY(&infos[i], PMIX_CLEANUP_IGNORE))
                partial = true;
        }
        for (std::size_t i = 0; i < count; ++i) {
            bool directory = PMIX_CHECK_KEY(&infos[i], PMIX_REGISTER_CLEANUP_DIR);
            if (!directory && !PMIX_CHECK_KEY(&infos[i], PMIX_REGISTER_CLEANUP))
                continue;
            for (auto& path : comma_list(infos[i].value))
                found.push_back({std::move(path), directory, directory && recursive && !partial});
        }
    }
    PMIX_INFO_FREE(infos, count);
    return found;
}

} // namespace canopy
