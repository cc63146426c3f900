// The node's answer board, writer side: one record per answered path, published with release order.
#include "stage/answer_board.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "stage/board_format.h"
#include "stage/fetch_protocol.h"

namespace canopy::stage {

Result<std::unique_ptr<AnswerBoard>> AnswerBoard::create(const std::string& path, std::uint32_t slots,
                                                         std::uint64_t bytes)
{
    if (slots == 0 || (slots & (slots - 1)) != 0 || bytes > UINT32_MAX ||
        bytes < canopy_stage_board_records_start(slots) + sizeof(canopy_stage_board_record))
        return make_error("stage answer board {}: {} slots in {} bytes is not a usable layout", path, slots, bytes);
    ::unlink(path.c_str());
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return make_error("cannot create the stage answer board {}: {}", path, std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        int error = errno;
        ::close(fd);
        ::unlink(path.c_str());
        return make_error("cannot size the stage answer board {}: {}", path, std::strerror(error));
    }
    // Pages are reserved before they are written (see reserve): a store into a hole of a full /dev/shm would be
    // SIGBUS, not an error.
    std::uint64_t start = canopy_stage_board_records_start(slots);
    if (int error = ::posix_fallocate(fd, 0, static_cast<off_t>(start)); error != 0) {
        ::close(fd);
        ::unlink(path.c_str());
        return make_error("cannot reserve the stage answer board {}: {}", path, std::strerror(error));
    }
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int error = errno;
        ::close(fd);
        ::unlink(path.c_str());
        return make_error("cannot map the stage answer board {}: {}", path, std::strerror(error));
    }
    auto* header = static_cast<canopy_stage_board_header*>(base);
    header->slots = slots;
    header->size = bytes;
    // The magic last: a rank that maps the file early sees no board rather than half of one.
    std::atomic_ref<std::uint32_t>(header->magic).store(CANOPY_STAGE_BOARD_MAGIC, std::memory_order_release);
    return std::unique_ptr<AnswerBoard>(new AnswerBoard(fd, static_cast<unsigned char*>(base), bytes, slots));
}

AnswerBoard::AnswerBoard(int fd, unsigned char* base, std::uint64_t size, std::uint32_t slots)
    : fd_(fd), base_(base), size_(size), slots_(slots),
      used_(canopy_stage_board_records_start(slots)), reserved_(used_)
{
}

AnswerBoard::~AnswerBoard()
{
    ::munmap(base_, size_);
    ::close(fd_);
}

bool AnswerBoard::reserve(std::uint64_t end)
{
    if (end <= reserved_)
        return true;
    // In steps of 1 MiB (one call per few thousand answers), or just what is needed when that much is not free.
    for (std::uint64_t want : {std::min(size_, std::max(end, reserved_ + (1u << 20))), end}) {
        if (::posix_fallocate(fd_, static_cast<off_t>(reserved_), static_cast<off_t>(want - reserved_)) == 0) {
            reserved_ = want;
            return true;
        }
    }
    return false;
}

std::uint32_t* AnswerBoard::slot(std::uint32_t i) const
{
    return reinterpret_cast<std::uint32_t*>(base_ + sizeof(canopy_stage_board_header)) + i;
}

bool AnswerBoard::publish(const std::string& path, const FetchAnswer& answer)
{
    bool serves_content = answer.serves(FetchKind::content);
    auto known = known_.find(path);
    if (known != known_.end() && (known->second.serves_content || !serves_content))
        return true;
    std::uint64_t text = path.size() + answer.link.size() + answer.mirror.size();
    std::uint64_t need = (sizeof(canopy_stage_board_record) + text + 7) & ~std::uint64_t{7};
    if (path.size() >= CANOPY_STAGE_PATH_MAX || answer.link.size() >= CANOPY_STAGE_PATH_MAX ||
        answer.mirror.size() >= CANOPY_STAGE_PATH_MAX || size_ - used_ < need ||
        (known == known_.end() && known_.size() + 1 >= slots_ / 2) ||   // keep probe chains short
        !reserve(used_ + need))
        return false;

    auto* record = reinterpret_cast<canopy_stage_board_record*>(base_ + used_);
    std::memset(record, 0, sizeof *record);
    record->hash = canopy_stage_hash(path.data(), path.size());
    record->path_len = static_cast<std::uint32_t>(path.size());
    record->link_len = static_cast<std::uint32_t>(answer.link.size());
    record->mirror_len = static_cast<std::uint32_t>(answer.mirror.size());
    record->facts = answer.facts;
    char* out = reinterpret_cast<char*>(record + 1);
    std::memcpy(out, path.data(), path.size());
    std::memcpy(out + path.size(), answer.link.data(), answer.link.size());
    std::memcpy(out + path.size() + answer.link.size(), answer.mirror.data(), answer.mirror.size());
    auto offset = static_cast<std::uint32_t>(used_);
    used_ += need;

    std::uint32_t index;
    if (known != known_.end()) {
        index = known->second.slot;   // the richer answer replaces the poorer one where readers look
    } else {
        std::uint32_t mask = slots_ - 1;
        index = static_cast<std::uint32_t>(record->hash) & mask;
        while (std::atomic_ref<std::uint32_t>(*slot(index)).load(std::memory_order_relaxed) != 0)
            index = (index + 1) & mask;
    }
    std::atomic_ref<std::uint32_t>(*slot(index)).store(offset, std::memory_order_release);
    known_[path] = Known{index, serves_content};
    ++published_;
    return true;
}

} // namespace canopy::stage
