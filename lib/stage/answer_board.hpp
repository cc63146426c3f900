// The node's answer board, writer side: canopyd publishes on-demand answers for its ranks (board_format.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "stage/fetch_cache.hpp"
#include "util/result.hpp"

namespace canopy::stage {

class AnswerBoard {
public:
    static constexpr std::uint32_t default_slots = 1u << 16;
    static constexpr std::uint64_t default_bytes = 64ull << 20;   // sparse: pages cost memory once written

    // Creates `path` (0600, replacing any old board) and maps it for writing.
    static Result<std::unique_ptr<AnswerBoard>> create(const std::string& path, std::uint32_t slots = default_slots,
                                                       std::uint64_t bytes = default_bytes);
    ~AnswerBoard();
    AnswerBoard(const AnswerBoard&) = delete;
    AnswerBoard& operator=(const AnswerBoard&) = delete;

    // Publishes the answer for `path` unless one that serves as much is there. False once the board is full, or
    // its filesystem is (the ranks then keep asking over the socket, which is slower, not wrong).
    bool publish(const std::string& path, const FetchAnswer& answer);

    std::uint64_t published() const { return published_; }

private:
    AnswerBoard(int fd, unsigned char* base, std::uint64_t size, std::uint32_t slots);
    std::uint32_t* slot(std::uint32_t i) const;
    // Allocates the file's pages up to `end` (false when the filesystem is full: the board stops growing).
    bool reserve(std::uint64_t end);

    int fd_;
    unsigned char* base_;
    std::uint64_t size_;
    std::uint32_t slots_;
    std::uint64_t used_;   // end of the last record
    std::uint64_t reserved_;
    std::uint64_t published_ = 0;
    struct Known {
        std::uint32_t slot;
        bool serves_content;
    };
    std::unordered_map<std::string, Known> known_;
};

} // namespace canopy::stage
