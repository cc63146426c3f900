// Reads along the bytes a rank sends its PMIx server, after the connect-ack, and hands over whole messages that
// start with given bytes (one command), so canopyd can see requests PMIx keeps to itself (the cleanups a rank
// registers) without holding the stream up. The stream itself is relayed untouched.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace canopy {

class PmixMessageTap {
public:
    // PMIx 4's message header: {int32 pindex, uint32 tag, uint32 nbytes, padding}, in network byte order.
    static constexpr std::size_t header_size = 16;
    // Larger messages are passed by unread; the requests tapped for are a few paths long.
    static constexpr std::size_t max_message = 65536;

    using Handler = std::function<void(std::string_view payload)>;

    // `prefix`: how the wanted messages' payloads start (their command, as libpmix packs it).
    PmixMessageTap(std::string prefix, Handler handler) : prefix_(std::move(prefix)), handler_(std::move(handler)) {}

    void feed(const char* data, std::size_t size);

private:
    std::string prefix_;
    Handler handler_;
    std::array<char, header_size> header_{};
    std::size_t header_have_ = 0;
    std::size_t payload_left_ = 0;   // of the current message, still to come
    bool wanted_ = false;            // the current message may still be one to hand over
    std::string payload_;
};

} // namespace canopy
