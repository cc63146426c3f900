// PMIx commands as libpmix packs them.
#include "pmix/pmix_commands.hpp"

#include <pmix.h>

namespace canopy::pmix_command {

std::string packed(std::uint8_t command)
{
    pmix_data_buffer_t buffer;
    PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
    std::string bytes;
    if (PMIx_Data_pack(nullptr, &buffer, &command, 1, PMIX_COMMAND) == PMIX_SUCCESS)
        bytes.assign(buffer.base_ptr, buffer.bytes_used);
    PMIX_DATA_BUFFER_DESTRUCT(&buffer);
    return bytes;
}

} // namespace canopy::pmix_command
