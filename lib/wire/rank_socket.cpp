// The ranks' socket protocol: its frames, its field shapes and its store requests' decoder.
#include "wire/rank_socket.hpp"

namespace canopy::wire {

std::vector<std::uint8_t> encode_rank_frame(std::uint8_t code, std::uint64_t id, std::span<const std::uint8_t> body)
{
    Writer writer;
    writer.u32(static_cast<std::uint32_t>(rank_frame_header - 4 + body.size()));
    writer.u8(code);
    writer.u64(id);
    writer.raw(body);
    return writer.take();
}

std::uint32_t rank_frame_length(std::span<const std::uint8_t, 4> prefix) { return Reader(prefix).u32(); }

Result<RankFrame> decode_rank_frame(std::span<const std::uint8_t> after_length)
{
    if (after_length.size() < rank_frame_header - 4)
        return make_error("a {}-byte frame on the ranks' socket is shorter than its header", after_length.size());
    Reader reader(after_length);
    RankFrame frame;
    frame.code = reader.u8();
    frame.id = reader.u64();
    frame.body = reader.rest();
    return frame;
}

Result<std::optional<std::size_t>> next_rank_frame(std::span<const std::uint8_t> stream, RankFrame& frame)
{
    if (stream.size() < 4)
        return std::optional<std::size_t>{};
    std::uint32_t length = rank_frame_length(stream.first<4>());
    if (length < rank_frame_header - 4 || length > max_rank_frame)
        return make_error("a frame on the ranks' socket announces {} bytes; its two ends may be from different "
                          "canopy versions", length);
    if (stream.size() - 4 < length)
        return std::optional<std::size_t>{};
    auto decoded = decode_rank_frame(stream.subspan(4, length));
    if (!decoded)
        return decoded.error();
    frame = std::move(*decoded);
    return std::optional<std::size_t>{4 + static_cast<std::size_t>(length)};
}

namespace {

void put_sized(Writer& writer, const std::string& text)
{
    writer.u32(static_cast<std::uint32_t>(text.size()));
    writer.raw(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

std::string get_sized(Decoding& decoding)
{
    Reader& reader = decoding.reader();
    std::uint32_t size = reader.u32();
    if (reader.ok() && size > reader.remaining()) {
        decoding.fail(make_error("{} names a {}-byte text in {} bytes", decoding.message(), size, reader.remaining()));
        return {};
    }
    std::string text(size, '\0');
    reader.raw(std::span(reinterpret_cast<std::uint8_t*>(text.data()), text.size()));
    return text;
}

} // namespace

void wire_put(Writer& writer, const FixedU32& field) { writer.u32(field.value); }
void wire_put(Writer& writer, const SizedText& field) { put_sized(writer, field.text); }

void wire_put(Writer& writer, const SizedTexts& field)
{
    writer.u32(static_cast<std::uint32_t>(field.texts.size()));
    for (const auto& text : field.texts)
        put_sized(writer, text);
}

void wire_put(Writer& writer, const RestText& field)
{
    writer.raw(std::span(reinterpret_cast<const std::uint8_t*>(field.text.data()), field.text.size()));
}

void wire_get(Decoding& decoding, FixedU32& field) { field.value = decoding.reader().u32(); }
void wire_get(Decoding& decoding, SizedText& field) { field.text = get_sized(decoding); }

void wire_get(Decoding& decoding, SizedTexts& field)
{
    Reader& reader = decoding.reader();
    std::uint32_t count = reader.u32();
    // Each text takes at least its 4-byte size, so a hostile count is refused before anything is allocated.
    if (reader.ok() && count > reader.remaining() / 4) {
        decoding.fail(make_error("{} names {} keys in {} bytes", decoding.message(), count, reader.remaining()));
        return;
    }
    field.texts.resize(count);
    for (auto& text : field.texts) {
        if (!reader.ok())
            return;
        text = get_sized(decoding);
    }
}

void wire_get(Decoding& decoding, RestText& field)
{
    auto rest = decoding.reader().rest();
    field.text.assign(rest.begin(), rest.end());
}

Result<StoreOperation> decode_store_operation(std::uint8_t op, std::span<const std::uint8_t> body)
{
#define CANOPY_DECODE_STORE(R)                                                                                   \
    if (op == static_cast<std::uint8_t>(R::op)) {                                                                \
        auto request = decode_fields<R>(body, R::name);                                                          \
        if (!request)                                                                                            \
            return request.error();                                                                              \
        return StoreOperation(std::move(*request));                                                              \
    }
    CANOPY_STORE_REQUESTS(CANOPY_DECODE_STORE)
#undef CANOPY_DECODE_STORE
    return make_error("unknown store operation {}", op);
}

} // namespace canopy::wire
