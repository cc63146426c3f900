// A tree position's fabric plane (docs/fabric.md): bulk data (staged files and their index, large fence results and
// replies) goes from parent to child over libfabric endpoints while the control plane stays on the authenticated
// TCP links. A child announces
// its endpoint on its link (wire::FabricHello) before it reports its subtree up, so a parent knows every child's
// path before the first bulk frame. Each message is sealed for its link (sealed_message.hpp); one that fails the
// check is dropped, never delivered, and fails the job with a line naming the link, as does any fabric error.
// Bounded: at most a few sends in flight per child, and while a child lags by more than a window, this position
// stops taking data from its parent, which holds back the root's sender.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "fabric/endpoint.hpp"
#include "fabric/sealed_message.hpp"
#include "tree/bulk_route.hpp"
#include "util/lifetime.hpp"
#include "position/tree_position.hpp"
#include "wire/auth.hpp"
#include "wire/messages.hpp"

namespace canopy::fabric {

class FabricPlane : public BulkRoute {
public:
    struct Hooks {
        // A bulk frame from the parent that passed its check, in the order the parent sent them.
        std::function<void(const wire::Frame& frame)> deliver;
        // One line naming the link: the job cannot go on.
        std::function<void(const std::string& line)> fail;
        // A file to remove if this process is killed outright (the node guard's watch_path).
        std::function<void(const std::string& path)> watch_file;
    };

    static constexpr std::size_t receive_buffers = 8;
    static constexpr std::size_t sends_per_child = 8;
    // Where the endpoint registers its memory (Endpoint::Buffers): sends in flight at once, over all children.
    static constexpr std::size_t staged_sends = 2 * sends_per_child;
    // A child this many bytes behind stops this position from taking more from its parent.
    static constexpr std::size_t window_bytes = 4u << 20;
    // The largest bulk frame: a stage chunk of 1 MiB and its message fields.
    static constexpr std::size_t max_frame_bytes = (1u << 20) + 4096;

    // Opens the endpoint of tree position `position` (0: the launcher) of `plan`; an error says why this position
    // has no fabric. `node` names it in lines.
    static Result<std::unique_ptr<FabricPlane>> open(boost::asio::io_context& io, const auth::Key& key,
                                                     const wire::LaunchPlan& plan, long position, std::string node,
                                                     ChildSet& children, Hooks hooks);
    ~FabricPlane() override;

    // What this position tells its parent.
    wire::FabricHello hello() const;
    // The endpoint's file that a process killed outright leaves behind, if any (Endpoint::shared_memory_file).
    const std::string& shared_memory_file() const;

    void broadcast(std::vector<std::uint8_t> frame, bool urgent = false) override;
    void send(const std::vector<long>& children, std::vector<std::uint8_t> frame) override;
    void relay(const wire::Frame& frame, bool urgent = false) override;
    std::size_t max_queued_bytes() const override;
    void child_announced(long position, const wire::FabricHello& hello) override;

private:
    struct Outgoing {
        std::vector<std::uint8_t> frame;
        std::uint64_t message = 0;
        PayloadTag tag;
    };
    struct ChildPath {
        enum class Kind { undecided, link, fabric } kind = Kind::undecided;
        fi_addr_t address = FI_ADDR_UNSPEC;
        Key key{};
        std::uint64_t next_sequence = 0;
        std::deque<std::shared_ptr<const Outgoing>> waiting;
        std::size_t waiting_bytes = 0;
        std::size_t in_flight = 0;
    };
    struct Send;
    struct Receive;

    FabricPlane(boost::asio::io_context& io, const auth::Key& key, long position, std::string node,
                std::string parent, ChildSet& children, Hooks hooks);
    std::shared_ptr<const Outgoing> made_here(std::vector<std::uint8_t> frame);
    void send_to(const std::vector<long>& children, std::shared_ptr<const Outgoing> message, bool urgent = false);
    void pump(long child);
    // Every child with a fabric path, starting after `after` and wrapping round, so that room freed in the
    // provider's queue or the endpoint's send slots goes to the children in turn.
    void pump_all(long after = -1);
    void sent(Send* send, const Status& status);
    void post(Receive& receive);
    void received(Receive& receive, const Status& status, std::size_t length);
    void deliver(Receive& receive, const SealHeader& header, const PayloadTag& tag);
    void resume_receives();
    bool lagging() const;
    void fail(const std::string& line);

    boost::asio::io_context& io_;
    auth::Key job_key_;
    long position_;
    std::string node_, parent_;   // names for lines
    ChildSet& children_;
    Hooks hooks_;
    std::map<long, ChildPath> paths_;
    std::map<Send*, std::unique_ptr<Send>> sends_;
    std::vector<std::unique_ptr<Receive>> receives_;
    std::vector<Receive*> held_;   // not posted again while a child lags
    Key payload_key_{};
    Key parent_key_{};
    std::uint64_t made_ = 0;                    // messages made here: numbered (position, count), never twice
    std::uint64_t expected_sequence_ = 0;       // the next from the parent, in its order
    // Checked messages that completed ahead of their turn (completions need not come in order): at most the
    // receive buffers.
    std::map<std::uint64_t, std::pair<Receive*, SealHeader>> early_;
    const wire::Frame* delivering_ = nullptr;   // the frame being handed on, its number and tag, for relay()
    std::uint64_t delivering_message_ = 0;
    PayloadTag delivering_tag_;
    boost::asio::steady_timer retry_;
    // Fault injection for tests (CANOPY_FAULT_FABRIC_CORRUPT=N): the N-th message this position sends, from 0,
    // has one byte changed after it was tagged, as a corrupting network or an attacker would. The other test hook,
    // CANOPY_TEST_FABRIC_REGISTER=1, makes the endpoint register its memory (Endpoint::Buffers::always_register).
    std::optional<std::uint64_t> corrupt_send_;
    std::uint64_t sends_made_ = 0;
    bool failed_ = false;
    Lifetime lifetime_;
    std::unique_ptr<Endpoint> endpoint_;   // last: closed first, so no completion reaches the operations above
};

// For a position whose job may move bulk data over a fabric (--fabric not off): opens its plane
// and makes it the position's bulk route. Returns the hello for the parent; without a plane, its why_not says
// why. A provider named on the command line that cannot open fails the job through hooks.fail; with auto the
// position keeps its links.
wire::FabricHello start_fabric_plane(boost::asio::io_context& io, const auth::Key& key, const wire::LaunchPlan& plan,
                                     long position, std::string node, TreePosition& tree, FabricPlane::Hooks hooks);

// Whether a job of this plan moves bulk data over a fabric at all.
bool uses_fabric(const wire::LaunchPlan& plan);

} // namespace canopy::fabric
