// --gpu-bind and --mem-bind: what the user asked for, parsed once in the launcher and again by each daemon.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace canopy {

// --gpu-bind none|closest|list:GPUS[:GPUS...], each GPUS a comma list of "3" (a GPU) or "3.1" (its tile 1).
struct GpuBind {
    enum class Kind { none, closest, list };
    Kind kind = Kind::none;
    std::vector<std::vector<std::string>> lists;   // for list: one entry per local rank, wrapping
    // How many a rank gets, and of what: --gpus-per-rank counts whole GPUs, --gpu-tiles-per-rank tiles. Neither:
    // one tile on a node whose GPUs have tiles, else one GPU.
    long per_rank = 0;   // 0: not given
    bool tiles = false;  // per_rank counts tiles
};

Result<GpuBind> parse_gpu_bind(std::string_view spec, long gpus_per_rank, long tiles_per_rank);

// --mem-bind none|local|list:NUMA[:NUMA...] (PALS's spelling): NUMA a comma list of the kernel's NUMA node numbers.
struct MemBind {
    enum class Kind { none, local, list };
    Kind kind = Kind::none;
    std::vector<std::vector<int>> lists;
};

Result<MemBind> parse_mem_bind(std::string_view spec);

} // namespace canopy
