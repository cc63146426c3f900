// The routed operations one tree position serves: each component registers a typed handler for its own
// requests (wire/routed.hpp), and the tree hands every request addressed here to the registry.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "util/result.hpp"
#include "wire/routed.hpp"

namespace canopy {

class RoutedServices {
public:
    using Bytes = std::vector<std::uint8_t>;
    // An encoded reply, or the error the requester gets.
    using Done = std::function<void(Status, Bytes)>;
    template <typename Request>
    using Reply = std::function<void(Result<typename Request::Reply>)>;
    // Serves one request from tree position `from` (this one for its own requests); calls `reply` exactly once,
    // now or later.
    template <typename Request>
    using Handler = std::function<void(long from, Request request, Reply<Request> reply)>;

    // `where` names this position in errors ("the launcher", "nid0042").
    explicit RoutedServices(std::string where) : where_(std::move(where)) {}

    // Registers the one handler of Request's operation at this position; a second is a programming error.
    template <typename Request>
    void serve(Handler<Request> handler)
    {
        auto& slot = handlers_.at(static_cast<std::size_t>(Request::op));
        if (slot)
            throw std::logic_error(fmt::format("two services registered for {}s", Request::name));
        slot = [handler = std::move(handler)](long from, std::span<const std::uint8_t> payload, Done done) {
            auto request = wire::decode_fields<Request>(payload, Request::name);
            if (!request)
                return done(request.error(), {});
            handler(from, std::move(*request), [done = std::move(done)](Result<typename Request::Reply> reply) {
                if (!reply)
                    return done(reply.error(), {});
                done(Status{}, wire::encode_fields(*reply));
            });
        };
    }

    // Hands a request to its operation's handler, or answers that nothing here serves it.
    void dispatch(long from, wire::RoutedOp op, std::span<const std::uint8_t> payload, Done done) const;

    // Encodes a request and decodes its reply, around `send`, which carries the bytes to the serving position.
    template <typename Request>
    static void call(Request request, Reply<Request> reply,
                     const std::function<void(wire::RoutedOp, Bytes, Done)>& send)
    {
        send(Request::op, wire::encode_fields(request), [reply = std::move(reply)](Status status, Bytes answer) {
            if (!status)
                return reply(status.error());
            reply(wire::decode_fields<typename Request::Reply>(answer, Request::Reply::name));
        });
    }

private:
    using Slot = std::function<void(long from, std::span<const std::uint8_t> payload, Done done)>;
    std::array<Slot, 256> handlers_;
    std::string where_;
};

} // namespace canopy
