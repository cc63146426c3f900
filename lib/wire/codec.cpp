// Frame codec for the tree protocol.
#include "wire/codec.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace canopy::wire {

void Writer::u8(std::uint8_t value) { buffer_.push_back(value); }

void Writer::u32(std::uint32_t value)
{
    for (int shift = 0; shift < 32; shift += 8)
        buffer_.push_back(static_cast<std::uint8_t>(value >> shift));
}

void Writer::u64(std::uint64_t value)
{
    for (int shift = 0; shift < 64; shift += 8)
        buffer_.push_back(static_cast<std::uint8_t>(value >> shift));
}

void Writer::i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }

void Writer::varint(std::uint64_t value)
{
    while (value >= 0x80) {
        buffer_.push_back(static_cast<std::uint8_t>(value | 0x80));
        value >>= 7;
    }
    buffer_.push_back(static_cast<std::uint8_t>(value));
}

void Writer::f64(double value) { u64(std::bit_cast<std::uint64_t>(value)); }

void Writer::bytes(std::span<const std::uint8_t> data)
{
    varint(data.size());
    raw(data);
}

void Writer::string(std::string_view text)
{
    varint(text.size());
    buffer_.insert(buffer_.end(), text.begin(), text.end());
}

void Writer::raw(std::span<const std::uint8_t> data) { buffer_.insert(buffer_.end(), data.begin(), data.end()); }

void Writer::strings(const std::vector<std::string>& list)
{
    varint(list.size());
    for (const auto& item : list)
        string(item);
}

bool Reader::take(std::size_t size)
{
    if (failed_ || data_.size() - offset_ < size) {
        failed_ = true;
        return false;
    }
    return true;
}

std::uint8_t Reader::u8()
{
    if (!take(1))
        return 0;
    return data_[offset_++];
}

std::uint32_t Reader::u32()
{
    if (!take(4))
        return 0;
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i)
        value |= static_cast<std::uint32_t>(data_[offset_++]) << (8 * i);
    return value;
}

std::uint64_t Reader::u64()
{
    if (!take(8))
        return 0;
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i)
        value |= static_cast<std::uint64_t>(data_[offset_++]) << (8 * i);
    return value;
}

std::int64_t Reader::i64() { return static_cast<std::int64_t>(u64()); }

std::uint64_t Reader::varint()
{
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        std::uint8_t byte = u8();
        if (failed_)
            return 0;
        value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
        if (!(byte & 0x80))
            return value;
    }
    failed_ = true;   // more than 10 bytes: not a varint we wrote
    return 0;
}

double Reader::f64() { return std::bit_cast<double>(u64()); }

std::size_t Reader::count()
{
    std::uint64_t value = varint();
    if (value > data_.size() - offset_) {
        failed_ = true;
        return 0;
    }
    return static_cast<std::size_t>(value);
}

std::vector<std::uint8_t> Reader::bytes()
{
    std::size_t size = count();
    if (!take(size))
        return {};
    std::vector<std::uint8_t> out(data_.begin() + offset_, data_.begin() + offset_ + size);
    offset_ += size;
    return out;
}

std::span<const std::uint8_t> Reader::bytes_view()
{
    std::size_t size = count();
    if (!take(size))
        return {};
    auto out = data_.subspan(offset_, size);
    offset_ += size;
    return out;
}

std::string Reader::string()
{
    std::size_t size = count();
    if (!take(size))
        return {};
    std::string out(reinterpret_cast<const char*>(data_.data()) + offset_, size);
    offset_ += size;
    return out;
}

void Reader::raw(std::span<std::uint8_t> out)
{
    if (!take(out.size()))
        return;
    std::memcpy(out.data(), data_.data() + offset_, out.size());
    offset_ += out.size();
}

std::vector<std::uint8_t> Reader::rest()
{
    std::vector<std::uint8_t> out(data_.begin() + static_cast<std::ptrdiff_t>(offset_), data_.end());
    offset_ = data_.size();
    return out;
}

std::vector<std::string> Reader::strings()
{
    std::size_t size = count();
    std::vector<std::string> out;
    out.reserve(size);
    for (std::size_t i = 0; i < size && ok(); ++i)
        out.push_back(string());
    return out;
}

std::vector<std::uint8_t> encode_frame(std::uint8_t type, std::span<const std::uint8_t> payload)
{
    Writer writer;
    start_frame(writer, type);
    writer.raw(payload);
    return finish_frame(writer);
}

void start_frame(Writer& writer, std::uint8_t type)
{
    writer.u32(0);   // the length, once the payload is written
    writer.u8(type);
}

std::vector<std::uint8_t> finish_frame(Writer& writer)
{
    auto frame = writer.take();
    auto length = static_cast<std::uint32_t>(frame.size() - header_size);
    for (int i = 0; i < 4; ++i)
        frame[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(length >> (8 * i));
    return frame;
}

void FrameDecoder::feed(std::span<const std::uint8_t> data)
{
    if (auto space = payload_space(); !space.empty()) {
        std::size_t taken = std::min(space.size(), data.size());
        std::copy_n(data.begin(), taken, space.begin());
        partial_filled_ += taken;
        data = data.subspan(taken);   // what follows belongs to the frames after it
        if (data.empty())
            return;
    }
    // Drop consumed bytes lazily so feeding many small frames stays linear.
    if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
        buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
        consumed_ = 0;
    }
    buffer_.insert(buffer_.end(), data.begin(), data.end());
}

Result<FrameView> view_frame(std::span<const std::uint8_t> bytes)
{
    if (bytes.size() < header_size)
        return make_error("a {}-byte frame is shorter than its header", bytes.size());
    Reader header(bytes.subspan(0, header_size));
    std::uint32_t length = header.u32();
    if (bytes.size() != header_size + length)
        return make_error("a frame of {} bytes says it carries {}", bytes.size(), length);
    return FrameView{header.u8(), bytes.subspan(header_size)};
}

Result<Frame> read_frame(std::span<const std::uint8_t> bytes)
{
    auto view = view_frame(bytes);
    if (!view)
        return view.error();
    return Frame{view->type, std::vector<std::uint8_t>(view->payload.begin(), view->payload.end())};
}

std::span<std::uint8_t> FrameDecoder::payload_space()
{
    if (!partial_)
        return {};
    return std::span(partial_->payload).subspan(partial_filled_);
}

void FrameDecoder::filled(std::size_t size)
{
    if (partial_)
        partial_filled_ = std::min(partial_filled_ + size, partial_->payload.size());
}

Result<std::optional<Frame>> FrameDecoder::next()
{
    if (partial_) {
        if (partial_filled_ < partial_->payload.size())
            return std::optional<Frame>{};
        std::optional<Frame> done = std::move(partial_);
        partial_.reset();
        partial_filled_ = 0;
        return done;
    }
    std::size_t available = buffer_.size() - consumed_;
    if (available < header_size)
        return std::optional<Frame>{};
    Reader header(std::span<const std::uint8_t>(buffer_).subspan(consumed_, header_size));
    std::uint32_t length = header.u32();
    std::uint8_t type = header.u8();
    if (length > max_payload_)
        return make_error("frame of {} bytes exceeds the limit of {} bytes", length, max_payload_);
    if (available < header_size + length) {
        if (length >= in_place_payload) {
            // Everything buffered after the header is the start of this payload.
            partial_.emplace(Frame{type, std::vector<std::uint8_t>(length)});
            auto start = buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_ + header_size);
            std::copy(start, buffer_.end(), partial_->payload.begin());
            partial_filled_ = available - header_size;
            buffer_.clear();
            consumed_ = 0;
        }
        return std::optional<Frame>{};
    }
    Frame frame;
    frame.type = type;
    auto start = buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_ + header_size);
    frame.payload.assign(start, start + length);
    consumed_ += header_size + length;
    return std::optional<Frame>{std::move(frame)};
}

} // namespace canopy::wire
