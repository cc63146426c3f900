#include "pmix/message_tap.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace canopy {

void PmixMessageTap::feed(const char* data, std::size_t size)
{
    while (size > 0) {
        if (payload_left_ == 0) {
            auto take = std::min(size, header_size - header_have_);
            std::memcpy(header_.data() + header_have_, data, take);
            header_have_ += take;
            data += take;
            size -= take;
            if (header_have_ < header_size)
                return;
            header_have_ = 0;
            std::uint32_t nbytes;
            std::memcpy(&nbytes, header_.data() + 8, sizeof nbytes);
            payload_left_ = ntohl(nbytes);
            wanted_ = payload_left_ >= prefix_.size() && payload_left_ <= max_message;
            payload_.clear();
            continue;
        }
        auto take = std::min(size, payload_left_);
        if (wanted_) {
            payload_.append(data, take);
            if (payload_.size() >= prefix_.size() && !payload_.starts_with(prefix_)) {
                wanted_ = false;
                payload_.clear();
            }
        }
        data += take;
        size -= take;
        payload_left_ -= take;
        if (payload_left_ == 0 && wanted_)
            handler_(payload_);
    }
}

} // namespace canopy
