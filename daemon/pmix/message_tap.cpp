// Framing a rank's PMIx stream by its message headers, as it passes the relay.
#include "pmix/message_tap.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace canopy {

bool PmixMessageTap::feed(const char* data, std::size_t size)
{
    if (stopped_)
        return false;
    while (size > 0) {
        if (payload_left_ == 0) {
            auto take = std::min(size, header_size - header_have_);
            std::memcpy(header_.data() + header_have_, data, take);
            header_have_ += take;
            data += take;
            size -= take;
            if (header_have_ < header_size)
                return true;
            header_have_ = 0;
            std::uint32_t nbytes;
            std::memcpy(&nbytes, header_.data() + 8, sizeof nbytes);
            payload_left_ = ntohl(nbytes);
            wanted_ = handler_ && payload_left_ >= prefix_.size() && payload_left_ <= max_message;
            payload_.clear();
            message_size_ = payload_left_;
            sizing_ = size_check_ && prefix_length_ > 0 && payload_left_ >= prefix_length_;
            head_.clear();
            continue;
        }
        auto take = std::min(size, payload_left_);
        if (sizing_) {
            head_.append(data, std::min(take, prefix_length_ - head_.size()));
            if (head_.size() == prefix_length_) {
                sizing_ = false;
                auto which = std::find(size_prefixes_.begin(), size_prefixes_.end(), head_);
                if (which != size_prefixes_.end() &&
                    !size_check_(static_cast<std::size_t>(which - size_prefixes_.begin()), message_size_)) {
                    stopped_ = true;
                    return false;
                }
            }
        }
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
    return true;
}

} // namespace canopy
