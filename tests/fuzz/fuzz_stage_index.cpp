// Fuzzes the stage index as it arrives from the tree or a --stage-manifest file (Index::from_blob), and the
// interposer's lookups over a mapped index, which check bounds but not the checksum.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "stage/index.hpp"
#include "stage/index_format.h"

namespace {

using namespace canopy::stage;

// Makes the header pass the cheap checks, so the fuzzer spends its time on the sections behind them.
void fix_header(std::vector<unsigned char>& blob, bool sum)
{
    if (blob.size() < sizeof(canopy_stage_header))
        return;
    auto* h = reinterpret_cast<canopy_stage_header*>(blob.data());
    std::memcpy(h->magic, CANOPY_STAGE_MAGIC, 8);
    h->version = CANOPY_STAGE_VERSION;
    h->endian = CANOPY_STAGE_ENDIAN;
    h->total_size = blob.size();
    if (sum && h->header_size >= sizeof *h && h->header_size <= blob.size())
        h->checksum = canopy_stage_hash(reinterpret_cast<const char*>(blob.data()) + h->header_size,
                                        blob.size() - h->header_size);
}

void look_up(const canopy_stage_view& view, const std::string& path)
{
    char normalized[CANOPY_STAGE_PATH_MAX];
    int trailing = 0;
    long len = canopy_stage_normalize(path.c_str(), normalized, &trailing);
    if (len < 0)
        return;
    for (int follow = 0; follow < 2; ++follow) {
        canopy_stage_answer answer{};
        canopy_stage_lookup(&view, normalized, static_cast<std::size_t>(len), follow, trailing, &answer);
        (void)canopy_stage_answer_stat(&view, &answer);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    std::uint8_t mode = data[0];
    std::vector<unsigned char> blob(data + 1, data + size);
    if (mode & 1)
        fix_header(blob, mode & 2);

    // A path to look up, from the input's tail.
    std::string probe = "/";
    for (std::size_t i = blob.size(); i > 0 && blob.size() - i < 64 && blob[i - 1] != 0; --i)
        probe.insert(probe.begin() + 1, static_cast<char>(blob[i - 1]));

    // The interposer: maps the file and trusts its checksum.
    canopy_stage_view view{};
    if (canopy_stage_view_open(&view, blob.data(), blob.size()) == 0) {
        look_up(view, probe);
        for (std::uint32_t i = 0; i < view.header->entry_count && i < 64; ++i) {
            const auto& e = view.entries[i];
            if (const char* path = canopy_stage_string(&view, e.path_off, e.path_len)) {
                look_up(view, path);
                look_up(view, std::string(path) + "/x/..");
            }
        }
    }

    // The root and the node caches: check everything, then read every part.
    auto index = Index::from_blob(std::move(blob), "fuzz index");
    if (!index)
        return 0;
    (void)index->prefixes();
    (void)index->requests();
    (void)index->content_files();
    (void)index->listed_directories();
    (void)index->content_bytes();
    (void)index->find(probe);
    for (const auto& entry : index->entries())
        (void)index->find(entry.path);
    return 0;
}
