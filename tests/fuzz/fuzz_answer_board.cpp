// Fuzzes a rank's reading of its node's answer board (a shared file the daemon writes; a damaged one must cost a
// fallback to the socket, never a crash), through the interposer's own on-demand lookup.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "interpose/on_demand.h"
#include "interpose/paths.h"

namespace {

void ask(on_demand& o, const char* path, std::size_t len)
{
    canopy_stage_fetch_reply reply{};
    static char text[PMAX];
    for (int kind : {CANOPY_STAGE_FETCH_METADATA, CANOPY_STAGE_FETCH_OPEN}) {
        (void)on_demand_fetch(&o, kind, path, len, &reply, text);
        (void)on_demand_fetch(&o, kind, path, len, &reply, nullptr);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 2)
        return 0;
    std::uint8_t mode = data[0];
    // A mapping is page-aligned; keep the records' 8-byte alignment as the file has it.
    std::vector<std::uint64_t> words((size - 1 + 7) / 8);
    std::memcpy(words.data(), data + 1, size - 1);
    auto* base = reinterpret_cast<unsigned char*>(words.data());
    std::uint64_t bytes = size - 1;
    if ((mode & 1) && bytes >= sizeof(canopy_stage_board_header)) {
        auto* h = reinterpret_cast<canopy_stage_board_header*>(base);
        h->magic = CANOPY_STAGE_BOARD_MAGIC;
        h->size = bytes;
    }

    // As the interposer starts it: a cache (whose skeletons answer names missing from a listed directory), and a
    // daemon's socket.
    static cache_dir cache = [] {
        cache_dir c{};
        (void)cache_dir_set(&c, "/nonexistent/canopy-fuzz-cache");
        return c;
    }();
    on_demand o{};
    o.cache = &cache;
    std::strcpy(o.socket_path, "/nonexistent/canopy-fuzz.sock");
    o.dead = 1;   // a board miss then falls back at once instead of asking a daemon
    if (canopy_stage_board_open(&o.board, base, bytes) != 0)
        return 0;

    // Every path the board holds, and one it may not.
    for (std::uint32_t i = 0; i < o.board.slots && i < 256; ++i) {
        std::uint32_t offset = *canopy_stage_board_slot(&o.board, i);
        if (const auto* r = canopy_stage_board_record_at(&o.board, offset))
            ask(o, canopy_stage_board_path(r), r->path_len);
    }
    std::string other = "/fuzz/" + std::to_string(mode);
    ask(o, other.c_str(), other.size());
    return 0;
}
