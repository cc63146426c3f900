// Reads along the bytes a rank sends its PMIx server, after the connect-ack, and hands over whole messages that
// start with given bytes (one command), so canopyd can see requests PMIx keeps to itself (the cleanups a rank
// registers) without holding the stream up. It can also show the size of each message of another command as soon
// as its first bytes are in, so that the relay can stop one too large (a commit past the job's limit) before the
// server gets it. The stream itself is relayed untouched.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace canopy {

class PmixMessageTap {
public:
    // PMIx 4's message header: {int32 pindex, uint32 tag, uint32 nbytes, padding}, in network byte order.
    static constexpr std::size_t header_size = 16;
    // Larger messages are passed by unread; the requests tapped for are a few paths long.
    static constexpr std::size_t max_message = 65536;

    using Handler = std::function<void(std::string_view payload)>;
    // A message's size (its payload's) and which of the checked prefixes it starts with, before any of it is passed
    // on: false stops the stream.
    using SizeCheck = std::function<bool(std::size_t which, std::size_t bytes)>;

    // `prefix`: how the wanted messages' payloads start (their command, as libpmix packs it). No handler: none is
    // wanted.
    PmixMessageTap(std::string prefix, Handler handler) : prefix_(std::move(prefix)), handler_(std::move(handler)) {}

    // Each message whose payload starts with one of `prefixes` (commands as libpmix packs them: all of one length,
    // not empty) goes to `check` once its first bytes are fed.
    void check_sizes(std::vector<std::string> prefixes, SizeCheck check)
    {
        size_prefixes_ = std::move(prefixes);
        size_check_ = std::move(check);
        prefix_length_ = size_prefixes_.empty() ? 0 : size_prefixes_.front().size();
    }

    // False once a size check has said no (from the feed holding that message's first bytes on): nothing of the
    // refused message, nor of what this feed held, may go on.
    bool feed(const char* data, std::size_t size);

private:
    std::string prefix_;
    Handler handler_;
    std::array<char, header_size> header_{};
    std::size_t header_have_ = 0;
    std::size_t payload_left_ = 0;   // of the current message, still to come
    bool wanted_ = false;            // the current message may still be one to hand over
    std::string payload_;
    std::vector<std::string> size_prefixes_;
    SizeCheck size_check_;
    std::size_t prefix_length_ = 0;
    bool sizing_ = false;            // the current message may still be one to check
    std::size_t message_size_ = 0;   // the current message's payload
    std::string head_;               // its first bytes, up to the prefixes' length
    bool stopped_ = false;
};

} // namespace canopy
