// Packing and unpacking published values.
#include "pmix/published_values.hpp"

#include <cstdlib>
#include <cstring>

#include "pmix/module_log.hpp"

namespace canopy {

Result<std::vector<std::uint8_t>> pack_published(const pmix_proc_t& publisher, const pmix_value_t& value)
{
    pmix_data_buffer_t buffer;
    PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
    // PMIx_Data_pack takes non-const sources; it only reads them.
    pmix_proc_t proc = publisher;
    pmix_status_t rc = PMIx_Data_pack(nullptr, &buffer, &proc, 1, PMIX_PROC);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_pack(nullptr, &buffer, const_cast<pmix_value_t*>(&value), 1, PMIX_VALUE);
    if (rc != PMIX_SUCCESS) {
        PMIX_DATA_BUFFER_DESTRUCT(&buffer);
        return make_error("cannot pack a published value ({})", pmix_error(rc));
    }
    pmix_byte_object_t bo;
    rc = PMIx_Data_unload(&buffer, &bo);
    PMIX_DATA_BUFFER_DESTRUCT(&buffer);
    if (rc != PMIX_SUCCESS)
        return make_error("cannot unload a published value ({})", pmix_error(rc));
    std::vector<std::uint8_t> out(reinterpret_cast<std::uint8_t*>(bo.bytes),
                                  reinterpret_cast<std::uint8_t*>(bo.bytes) + bo.size);
    PMIX_BYTE_OBJECT_DESTRUCT(&bo);
    return out;
}

pmix_status_t unpack_published(const std::vector<std::uint8_t>& bytes, pmix_pdata_t& out)
{
    pmix_data_buffer_t buffer;
    PMIX_DATA_BUFFER_CONSTRUCT(&buffer);
    pmix_byte_object_t bo;
    bo.bytes = static_cast<char*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    bo.size = bytes.size();
    if (!bo.bytes)
        return PMIX_ERR_NOMEM;
    std::memcpy(bo.bytes, bytes.data(), bytes.size());
    pmix_status_t rc = PMIx_Data_load(&buffer, &bo);   // takes ownership of bo.bytes
    int32_t count = 1;
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_unpack(nullptr, &buffer, &out.proc, &count, PMIX_PROC);
    count = 1;   // PMIX_VALUE unpacks into an array of pmix_value_t, here the one in `out`
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Data_unpack(nullptr, &buffer, &out.value, &count, PMIX_VALUE);
    PMIX_DATA_BUFFER_DESTRUCT(&buffer);
    return rc;
}

} // namespace canopy
